// Tool-call round trips in the three APIs. The tiny model is random, so it is not asked to call
// a tool; instead each request carries a history with an assistant tool call and its result.
// Checks, per API:
//  1. the server renders the history exactly as spec §5.4 says: the same text, rendered here
//     independently and sent raw to /v1/completions, gives the same prompt token count and the
//     same greedy reply;
//  2. a follow-up request (history + the reply + a new user turn) reuses the live prefix:
//     GET /metrics dsv4_prefix_extend_total + dsv4_prefix_rewind_total grow,
//     dsv4_prefix_rebuild_total does not, and dsv4_cached_tokens_total grows by at least the
//     first prompt's length.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WEATHER_SCHEMA, anthropic, inputTokens, metric, metrics, modelId, openai } from './helpers.mjs';

const N = 8;
const D = '｜DSML｜';
const BOS = '<｜begin▁of▁sentence｜>';
const EOS = '<｜end▁of▁sentence｜>';
const USER = '<｜User｜>';
const ASSISTANT = '<｜Assistant｜>';

// ds4_server.c append_tools_prompt_text (antirez/ds4 @8d57664, lines 1995-2019): prompt data.
const TOOLS_PREAMBLE =
  '## Tools\n\nYou have access to a set of tools to help answer the user question. You can invoke tools by ' +
  `writing a "<${D}tool_calls>" block like the following:\n\n<${D}tool_calls>\n<${D}invoke name="$TOOL_NAME">\n` +
  `<${D}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</${D}parameter>\n...\n</${D}invoke>\n` +
  `<${D}invoke name="$TOOL_NAME2">\n...\n</${D}invoke>\n</${D}tool_calls>\n\n` +
  'String parameters should be specified as raw text and set `string="true"`. Preserve characters such as `>`, ' +
  '`&`, and `&&` exactly; never replace normal string characters with XML or HTML entity escapes. Only if a ' +
  `string value itself contains the exact closing parameter tag \`</${D}parameter>\`, write that tag as ` +
  `\`&lt;/${D}parameter>\` inside the value. For all other types (numbers, booleans, arrays, objects), pass the ` +
  'value in JSON format and set `string="false"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST ' +
  'output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n' +
  'Otherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n';
const TOOLS_EPILOGUE =
  '\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls. ' +
  'Use the exact parameter names from the schemas.';

const DESCRIPTION = 'Current weather for a city';
const TOOLS_BLOCK =
  TOOLS_PREAMBLE +
  JSON.stringify({ name: 'get_weather', description: DESCRIPTION, parameters: WEATHER_SCHEMA }) +
  TOOLS_EPILOGUE;

const attr = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
function dsml(calls) {
  let s = `\n\n<${D}tool_calls>\n`;
  for (const c of calls) {
    s += `<${D}invoke name="${attr(c.name)}">\n`;
    for (const [k, v] of Object.entries(c.args)) {
      const str = typeof v === 'string';
      s += `<${D}parameter name="${attr(k)}" string="${str}">${str ? v : JSON.stringify(v)}</${D}parameter>\n`;
    }
    s += `</${D}invoke>\n`;
  }
  return `${s}</${D}tool_calls>`;
}

const QUESTION = 'What is the weather in Paris?';
const ARGS = { city: 'Paris', days: 3 };
const RESULT = '{"temp_c":21,"sky":"clear"}';
const PREFACE = 'Let me check.';
const FOLLOW_UP = 'Thanks. And tomorrow?';

// Non-thinking rendering of: [tools] user, assistant(PREFACE + call), tool result, pending reply.
const EXPECTED_PROMPT =
  BOS +
  TOOLS_BLOCK +
  USER +
  QUESTION +
  ASSISTANT +
  '</think>' +
  PREFACE +
  dsml([{ name: 'get_weather', args: ARGS }]) +
  EOS +
  USER +
  `<tool_result>${RESULT}</tool_result>` +
  ASSISTANT +
  '</think>';

async function reference() {
  const r = await openai.completions.create({
    model: await modelId(),
    prompt: EXPECTED_PROMPT.slice(BOS.length),
    max_tokens: N,
    temperature: 0,
  });
  return { text: r.choices[0].text, promptTokens: r.usage.prompt_tokens };
}

async function checkReuse(first, followUp) {
  const before = await metrics();
  const out = await followUp();
  const after = await metrics();
  const d = (name) => metric(after, name) - metric(before, name);
  assert.equal(d('dsv4_prefix_rebuild_total'), 0, 'follow-up was prefilled from scratch');
  assert.ok(d('dsv4_prefix_extend_total') + d('dsv4_prefix_rewind_total') >= 1, 'follow-up did not reuse the live prefix');
  // all of the previous prompt but its last token, which is evaluated again for its logits
  assert.ok(
    d('dsv4_cached_tokens_total') >= first.promptTokens - 1,
    `cached tokens grew by ${d('dsv4_cached_tokens_total')}, want >= ${first.promptTokens - 1}`,
  );
  return out;
}

test('OpenAI chat: tool-call history renders exactly and the follow-up reuses the prefix', async () => {
  const model = await modelId();
  const ref = await reference();
  const tools = [{ type: 'function', function: { name: 'get_weather', description: DESCRIPTION, parameters: WEATHER_SCHEMA } }];
  const messages = [
    { role: 'user', content: QUESTION },
    {
      role: 'assistant',
      content: PREFACE,
      tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(ARGS) } }],
    },
    { role: 'tool', tool_call_id: 'call_w1', content: RESULT },
  ];
  const common = { model, tools, max_tokens: N, temperature: 0, reasoning_effort: 'none' };
  const a = await openai.chat.completions.create({ ...common, messages });
  assert.equal(a.usage.prompt_tokens, ref.promptTokens, 'rendered prompt differs from spec §5.4');
  const reply = a.choices[0].message.content ?? '';
  assert.equal(reply, ref.text);
  assert.ok(!a.choices[0].message.tool_calls?.length || a.choices[0].finish_reason === 'tool_calls');
  await checkReuse({ promptTokens: a.usage.prompt_tokens }, () =>
    openai.chat.completions.create({
      ...common,
      messages: [...messages, { role: 'assistant', content: reply }, { role: 'user', content: FOLLOW_UP }],
    }),
  );
  // tool_choice none drops the tools block: the prompt is shorter
  const none = await openai.chat.completions.create({ ...common, messages, tool_choice: 'none' });
  assert.ok(none.usage.prompt_tokens < a.usage.prompt_tokens);
});

test('OpenAI responses: function_call history renders exactly and the follow-up reuses the prefix', async () => {
  const model = await modelId();
  const ref = await reference();
  const tools = [{ type: 'function', name: 'get_weather', description: DESCRIPTION, parameters: WEATHER_SCHEMA, strict: false }];
  const input = [
    { role: 'user', content: QUESTION },
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: PREFACE }] },
    { type: 'function_call', call_id: 'call_w2', name: 'get_weather', arguments: JSON.stringify(ARGS) },
    { type: 'function_call_output', call_id: 'call_w2', output: RESULT },
  ];
  const common = { model, tools, max_output_tokens: N, temperature: 0, reasoning: { effort: 'none' } };
  const a = await openai.responses.create({ ...common, input });
  assert.equal(a.usage.input_tokens, ref.promptTokens, 'rendered prompt differs from spec §5.4');
  assert.equal(a.output_text, ref.text);
  await checkReuse({ promptTokens: a.usage.input_tokens }, () =>
    openai.responses.create({
      ...common,
      input: [
        ...input,
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: a.output_text }] },
        { role: 'user', content: FOLLOW_UP },
      ],
    }),
  );
});

test('Anthropic messages: tool_use history renders exactly and the follow-up reuses the prefix', async () => {
  const model = await modelId();
  const ref = await reference();
  const tools = [{ name: 'get_weather', description: DESCRIPTION, input_schema: WEATHER_SCHEMA }];
  const messages = [
    { role: 'user', content: QUESTION },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: PREFACE },
        { type: 'tool_use', id: 'toolu_w3', name: 'get_weather', input: ARGS },
      ],
    },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_w3', content: RESULT }] },
  ];
  const common = { model, tools, max_tokens: N, temperature: 0, thinking: { type: 'disabled' } };
  const a = await anthropic.messages.create({ ...common, messages });
  const input = inputTokens(a.usage);
  assert.equal(input, ref.promptTokens, 'rendered prompt differs from spec §5.4');
  const reply = a.content
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('');
  assert.equal(reply, ref.text);
  await checkReuse({ promptTokens: input }, () =>
    anthropic.messages.create({
      ...common,
      messages: [...messages, { role: 'assistant', content: reply || '.' }, { role: 'user', content: FOLLOW_UP }],
    }),
  );
});
