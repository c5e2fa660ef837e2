/* The tools system block. The prompt text is data copied byte-for-byte from antirez/ds4
 * ds4_server.c, append_tools_prompt_text (lines 1995-2019 at commit 8d57664): the model was
 * prompted with exactly these bytes, so any drift changes its tool-calling behaviour. */
#include "text/dsml.h"

#include "text/special.h"

#define D DSV4_DSML_STR

static const char TOOLS_PREAMBLE[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user question. "
    "You can invoke tools by writing a \"<" D "tool_calls>\" block like the following:\n\n"
    "<" D "tool_calls>\n"
    "<" D "invoke name=\"$TOOL_NAME\">\n"
    "<" D "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" D "parameter>\n"
    "...\n"
    "</" D "invoke>\n"
    "<" D "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" D "invoke>\n"
    "</" D "tool_calls>\n\n"
    "String parameters should be specified as raw text and set `string=\"true\"`. "
    "Preserve characters such as `>`, `&`, and `&&` exactly; never replace normal string characters with "
    "XML or HTML entity escapes. "
    "Only if a string value itself contains the exact closing parameter tag `</" D "parameter>`, write that "
    "tag as `&lt;/" D "parameter>` inside the value. "
    "For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";

static const char TOOLS_EPILOGUE[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls. "
    "Use the exact parameter names from the schemas.";

dsv4_status dsv4_dsml_render_tools_block(const char *const *schemas_json, size_t n, dsv4_strbuf *out,
                                         dsv4_error *err) {
    if (n && !schemas_json) return dsv4_fail(err, DSV4_ERR_INVALID, "tools block: schemas array is NULL");
    /* ds4 joins the non-empty schemas with '\n' and writes nothing when none is left */
    size_t used = 0;
    for (size_t i = 0; i < n; i++) used += schemas_json[i] && schemas_json[i][0];
    if (used == 0) return DSV4_OK;
    dsv4_status st = dsv4_strbuf_puts(out, TOOLS_PREAMBLE, err);
    bool first = true;
    for (size_t i = 0; i < n && st == DSV4_OK; i++) {
        if (!schemas_json[i] || !schemas_json[i][0]) continue;
        if (!first) st = dsv4_strbuf_puts(out, "\n", err);
        if (st == DSV4_OK) st = dsv4_strbuf_puts(out, schemas_json[i], err);
        first = false;
    }
    if (st == DSV4_OK) st = dsv4_strbuf_puts(out, TOOLS_EPILOGUE, err);
    return st;
}
