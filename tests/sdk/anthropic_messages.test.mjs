// Anthropic messages through the official SDK: message shape, the SSE event sequence
// (message_start, content_block_start/delta/stop, message_delta, message_stop), thinking blocks
// and deltas, stop sequences, agreement with OpenAI chat, errors in the Anthropic shape.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { BASE, PROMPT, anthropic, collect, inputTokens, modelId, openai, pickStop } from './helpers.mjs';

const N = 24;
const req = async (extra = {}) => ({
  model: await modelId(),
  max_tokens: N,
  messages: [{ role: 'user', content: PROMPT }],
  temperature: 0,
  thinking: { type: 'disabled' },
  ...extra,
});

function textOf(msg) {
  return msg.content
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('');
}

test('messages non-stream: shape, usage, equals OpenAI chat', async () => {
  const m = await anthropic.messages.create(await req());
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(typeof m.id, 'string');
  assert.ok(m.id.length > 0);
  assert.equal(typeof m.model, 'string');
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(m.stop_reason), `stop_reason ${m.stop_reason}`);
  if (m.stop_reason === 'max_tokens') assert.equal(m.usage.output_tokens, N);
  assert.ok(inputTokens(m.usage) > 0);
  assert.ok(m.usage.output_tokens > 0 && m.usage.output_tokens <= N);
  assert.ok(m.content.length >= 1);
  assert.equal(m.content[0].type, 'text');
  const chat = await openai.chat.completions.create({
    model: await modelId(),
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: N,
    temperature: 0,
    reasoning_effort: 'none',
  });
  assert.equal(textOf(m), chat.choices[0].message.content);
  assert.equal(inputTokens(m.usage), chat.usage.prompt_tokens);
});

function checkEventSequence(events) {
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  const start = events[0].message;
  assert.equal(start.type, 'message');
  assert.equal(start.role, 'assistant');
  assert.deepEqual(start.content, []);
  assert.ok(inputTokens(start.usage) > 0);
  // blocks: start, deltas of the block's own kind, stop; indexes in order from 0
  let open = -1;
  let next = 0;
  const blocks = [];
  for (const e of events.slice(1, -2)) {
    if (e.type === 'ping') continue;
    if (e.type === 'content_block_start') {
      assert.equal(open, -1, 'a block starts before the previous one stopped');
      assert.equal(e.index, next++);
      open = e.index;
      blocks.push({ type: e.content_block.type, text: '', deltas: [] });
    } else if (e.type === 'content_block_delta') {
      assert.equal(e.index, open);
      const b = blocks[open];
      b.deltas.push(e.delta.type);
      if (e.delta.type === 'text_delta') b.text += e.delta.text;
      else if (e.delta.type === 'thinking_delta') b.text += e.delta.thinking;
      else if (e.delta.type === 'input_json_delta') b.text += e.delta.partial_json;
    } else if (e.type === 'content_block_stop') {
      assert.equal(e.index, open);
      open = -1;
    } else {
      assert.fail(`unexpected event ${e.type} between message_start and message_delta`);
    }
  }
  assert.equal(open, -1, 'a block was never stopped');
  for (const b of blocks) {
    const want = { text: 'text_delta', thinking: 'thinking_delta', tool_use: 'input_json_delta' }[b.type];
    assert.ok(want, `unknown block type ${b.type}`);
    for (const d of b.deltas) assert.ok(d === want || (b.type === 'thinking' && d === 'signature_delta'), `${d} in ${b.type}`);
  }
  const md = events.at(-2);
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(md.delta.stop_reason));
  assert.ok(md.usage.output_tokens > 0);
  return { blocks, stop: md.delta, usage: md.usage };
}

test('messages stream: event sequence and same text as non-stream', async () => {
  const ref = await anthropic.messages.create(await req());
  const events = await collect(await anthropic.messages.create({ ...(await req()), stream: true }));
  const { blocks, stop, usage } = checkEventSequence(events);
  assert.deepEqual(
    blocks.map((b) => b.type),
    ['text'],
  );
  assert.equal(blocks[0].text, textOf(ref));
  assert.equal(stop.stop_reason, ref.stop_reason);
  assert.equal(usage.output_tokens, ref.usage.output_tokens);
  // the SDK's stream helper assembles the same message
  const final = await anthropic.messages.stream(await req()).finalMessage();
  assert.equal(textOf(final), textOf(ref));
});

test('messages stop_sequences', async (t) => {
  const ref = await anthropic.messages.create(await req());
  const pick = pickStop(textOf(ref));
  if (!pick) return t.skip('greedy output has no usable stop string');
  const m = await anthropic.messages.create(await req({ stop_sequences: [pick.stop] }));
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, pick.stop);
  assert.equal(textOf(m), pick.before);
});

test('messages thinking enabled: thinking block and thinking deltas', async () => {
  const body = await req({ thinking: { type: 'enabled', budget_tokens: 1024 }, max_tokens: 16 });
  delete body.temperature; // Anthropic forbids temperature with thinking
  const m = await anthropic.messages.create(body);
  assert.equal(m.content[0].type, 'thinking', `blocks: ${m.content.map((b) => b.type).join(',')}`);
  assert.equal(typeof m.content[0].thinking, 'string');
  assert.ok(m.content[0].thinking.length > 0);
  const events = await collect(await anthropic.messages.create({ ...body, stream: true }));
  const { blocks } = checkEventSequence(events);
  assert.equal(blocks[0].type, 'thinking');
  assert.ok(blocks[0].deltas.includes('thinking_delta'), 'no thinking_delta events');
  assert.ok(blocks[0].text.length > 0);
});

test('messages with system prompt, multi-turn history and content blocks', async () => {
  const m = await anthropic.messages.create(
    await req({
      system: [{ type: 'text', text: 'You are terse.' }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello.' }] },
        { role: 'user', content: PROMPT },
      ],
    }),
  );
  assert.equal(m.type, 'message');
  assert.ok(inputTokens(m.usage) > 10);
});

test('messages errors come back in the Anthropic shape', async () => {
  const model = await modelId();
  await assert.rejects(
    anthropic.messages.create({ model, max_tokens: 4, messages: [{ role: 'wizard', content: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error',
  );
  await assert.rejects(
    anthropic.messages.create({ model, max_tokens: 'many', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 400 && e.error?.type === 'error',
  );
  const r = await fetch(`${BASE}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: '{"model":',
    signal: AbortSignal.timeout(10_000),
  });
  assert.equal(r.status, 400);
  const j = await r.json();
  assert.equal(j.type, 'error');
  assert.equal(typeof j.error.message, 'string');
});
