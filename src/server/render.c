/* Request -> prompt text: the server chat rendering with the DSML tools block in the system
 * region, or BOS + raw text for /v1/completions. */
#include <string.h>

#include "server/request.h"
#include "text/dsml.h"
#include "text/special.h"

dsv4_status srv_request_render(const srv_request *r, dsv4_strbuf *out, dsv4_error *err) {
    if (r->api == SRV_API_COMPLETIONS) {
        const char *p = r->raw_prompt ? r->raw_prompt : "";
        dsv4_status st = DSV4_OK;
        if (strncmp(p, DSV4_BOS_STR, strlen(DSV4_BOS_STR)) != 0)
            st = dsv4_strbuf_puts(out, DSV4_BOS_STR, err);
        return st == DSV4_OK ? dsv4_strbuf_puts(out, p, err) : st;
    }
    dsv4_strbuf tools = {0};
    dsv4_status st = DSV4_OK;
    if (r->n_tools && r->tool_choice != SRV_TOOLS_NONE)
        st = dsv4_dsml_render_tools_block((const char *const *)r->tool_schemas, r->n_tools, &tools, err);
    if (st == DSV4_OK) st = dsv4_chat_render_text(r->msgs, r->n_msgs, tools.data, r->think, out, err);
    dsv4_strbuf_free(&tools);
    return st;
}
