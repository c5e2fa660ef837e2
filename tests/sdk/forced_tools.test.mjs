// Forced tool calls (tool_choice) in the three APIs, streaming and not, with the full round trip:
// the tiny random model never calls a tool by itself, so the forced tool_choice makes the SERVER
// emit the DSML structure while the model samples the values (src/server/constrain.c). Per API:
//  1. the reply is a tool call of the forced function whose arguments parse as JSON with the
//     schema's keys and types (city: string, days: integer), finish/stop reason tool calls;
//  2. the client sends the call back with its result: GET /metrics shows the follow-up extended
//     the live session (dsv4_prefix_extend_total +1, dsv4_prefix_rebuild_total +0) and its cached
//     tokens cover the whole first turn (its prompt and every generated token), i.e. the
//     remembered DSML was replayed byte for byte.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WEATHER_SCHEMA, anthropic, collect, inputTokens, metric, metrics, modelId, openai } from './helpers.mjs';

const MAX = 400; // enough for the forced structure with two parameters
const QUESTION = 'What is the weather in Paris?';
const RESULT = '{"temp_c":21,"sky":"clear"}';
const TIME_SCHEMA = { type: 'object', properties: { tz: { type: 'string' } }, required: ['tz'] };

function checkArgs(args) {
  const a = typeof args === 'string' ? JSON.parse(args) : args;
  assert.deepEqual(Object.keys(a), ['city', 'days'], `arguments ${JSON.stringify(a)}`);
  assert.equal(typeof a.city, 'string');
  assert.ok(Number.isInteger(a.days), `days ${a.days} is not an integer`);
  return a;
}

async function followUp(send) {
  const before = await metrics();
  const out = await send();
  const after = await metrics();
  const d = (name) => metric(after, name) - metric(before, name);
  assert.equal(d('dsv4_prefix_rebuild_total'), 0, 'follow-up was prefilled from scratch');
  assert.equal(d('dsv4_prefix_rewind_total'), 0, 'follow-up rewound instead of extending');
  assert.equal(d('dsv4_prefix_extend_total'), 1, 'follow-up did not extend the live session');
  return out;
}

function coversFirstTurn(cached, first) {
  assert.ok(
    cached >= first.prompt + first.completion,
    `cached ${cached} < first turn ${first.prompt} prompt + ${first.completion} generated tokens`,
  );
}

const chatTools = [
  { type: 'function', function: { name: 'get_time', parameters: TIME_SCHEMA } },
  { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: WEATHER_SCHEMA } },
];

test('OpenAI chat: a named tool_choice is a tool call; the result round trip extends the prefix', async () => {
  const model = await modelId();
  const messages = [{ role: 'user', content: QUESTION }];
  const common = { model, tools: chatTools, max_tokens: MAX, temperature: 0, reasoning_effort: 'none' };
  const a = await openai.chat.completions.create({
    ...common,
    messages,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const c = a.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.match(call.id, /^call_/);
  checkArgs(call.function.arguments);
  const b = await followUp(() =>
    openai.chat.completions.create({
      ...common,
      max_tokens: 4,
      messages: [
        ...messages,
        { role: 'assistant', content: null, tool_calls: c.message.tool_calls },
        { role: 'tool', tool_call_id: call.id, content: RESULT },
      ],
    }),
  );
  coversFirstTurn(b.usage.prompt_tokens_details.cached_tokens, {
    prompt: a.usage.prompt_tokens,
    completion: a.usage.completion_tokens,
  });
});

test('OpenAI chat: "required" streams a tool call (thinking closed first); the round trip extends', async () => {
  const model = await modelId();
  const messages = [{ role: 'user', content: QUESTION }];
  const tools = [chatTools[1]];
  const stream = await openai.chat.completions.create({
    model,
    tools,
    messages,
    tool_choice: 'required',
    max_tokens: MAX,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = await collect(stream);
  let name = '';
  let args = '';
  let id = '';
  let finish = null;
  let usage = null;
  for (const ch of chunks) {
    if (ch.usage) usage = ch.usage;
    for (const choice of ch.choices) {
      assert.ok(!choice.delta?.content, 'forced call streamed content');
      for (const tc of choice.delta?.tool_calls ?? []) {
        if (tc.id) id = tc.id;
        if (tc.function?.name) name += tc.function.name;
        if (tc.function?.arguments) args += tc.function.arguments;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(name, 'get_weather');
  checkArgs(args);
  assert.ok(usage, 'no usage chunk');
  const b = await followUp(() =>
    openai.chat.completions.create({
      model,
      tools,
      max_tokens: 4,
      messages: [
        ...messages,
        { role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name, arguments: args } }] },
        { role: 'tool', tool_call_id: id, content: RESULT },
      ],
    }),
  );
  coversFirstTurn(b.usage.prompt_tokens_details.cached_tokens, {
    prompt: usage.prompt_tokens,
    completion: usage.completion_tokens,
  });
});

test('OpenAI responses: forced function_call items (plain and streamed); the round trip extends', async () => {
  const model = await modelId();
  const tools = [
    { type: 'function', name: 'get_time', parameters: TIME_SCHEMA, strict: false },
    { type: 'function', name: 'get_weather', description: 'Weather', parameters: WEATHER_SCHEMA, strict: false },
  ];
  const input = [{ role: 'user', content: QUESTION }];
  const common = { model, tools, max_output_tokens: MAX, reasoning: { effort: 'none' } };
  const a = await openai.responses.create({ ...common, input, tool_choice: { type: 'function', name: 'get_weather' } });
  assert.equal(a.status, 'completed');
  const calls = a.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  checkArgs(calls[0].arguments);
  const b = await followUp(() =>
    openai.responses.create({
      ...common,
      max_output_tokens: 4,
      input: [...input, ...a.output, { type: 'function_call_output', call_id: calls[0].call_id, output: RESULT }],
    }),
  );
  coversFirstTurn(b.usage.input_tokens_details.cached_tokens, {
    prompt: a.usage.input_tokens,
    completion: a.usage.output_tokens,
  });

  // streamed, "required" with two tools: the model picks one; argument events add up
  const events = await collect(
    await openai.responses.create({ ...common, input, tool_choice: 'required', stream: true }),
  );
  const done = events.find((e) => e.type === 'response.completed');
  assert.ok(done, 'no response.completed');
  const items = done.response.output.filter((o) => o.type === 'function_call');
  assert.equal(items.length, 1);
  assert.ok(['get_weather', 'get_time'].includes(items[0].name));
  const deltas = events
    .filter((e) => e.type === 'response.function_call_arguments.delta')
    .map((e) => e.delta)
    .join('');
  assert.equal(deltas, items[0].arguments);
  const parsed = JSON.parse(items[0].arguments);
  if (items[0].name === 'get_weather') checkArgs(parsed);
  else assert.deepEqual(Object.keys(parsed), ['tz']);
});

test('Anthropic messages: tool_choice tool / any give tool_use (plain and streamed); the round trip extends', async () => {
  const model = await modelId();
  const tools = [
    { name: 'get_time', input_schema: TIME_SCHEMA },
    { name: 'get_weather', description: 'Weather', input_schema: WEATHER_SCHEMA },
  ];
  const messages = [{ role: 'user', content: QUESTION }];
  // thinking on (the default): the server closes the reasoning block before the call
  const a = await anthropic.messages.create({
    model,
    tools,
    messages,
    max_tokens: MAX,
    tool_choice: { type: 'tool', name: 'get_weather' },
  });
  assert.equal(a.stop_reason, 'tool_use');
  const uses = a.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, 'get_weather');
  assert.match(uses[0].id, /^toolu_/);
  checkArgs(uses[0].input);
  const b = await followUp(() =>
    anthropic.messages.create({
      model,
      tools,
      max_tokens: 4,
      messages: [
        ...messages,
        { role: 'assistant', content: a.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: RESULT }] },
      ],
    }),
  );
  coversFirstTurn(b.usage.cache_read_input_tokens, { prompt: inputTokens(a.usage), completion: a.usage.output_tokens });

  // streamed, "any" without thinking
  const s = anthropic.messages.stream({
    model,
    tools: [tools[1]],
    messages,
    max_tokens: MAX,
    tool_choice: { type: 'any' },
    thinking: { type: 'disabled' },
  });
  const m = await s.finalMessage();
  assert.equal(m.stop_reason, 'tool_use');
  const u = m.content.filter((x) => x.type === 'tool_use');
  assert.equal(u.length, 1);
  assert.equal(u[0].name, 'get_weather');
  checkArgs(u[0].input);
  assert.ok(!m.content.some((x) => x.type === 'text' && x.text), 'forced call produced text');
});

test('tool_choice naming an unknown function or forcing without tools is a 400', async () => {
  const model = await modelId();
  await assert.rejects(
    openai.chat.completions.create({
      model,
      tools: chatTools,
      messages: [{ role: 'user', content: 'x' }],
      tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    (e) => e.status === 400 && /tool_choice/.test(e.message),
  );
  await assert.rejects(
    anthropic.messages.create({
      model,
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x' }],
      tool_choice: { type: 'any' },
    }),
    (e) => e.status === 400,
  );
});
