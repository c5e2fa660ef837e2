// OpenAI chat.completions through the official SDK: response shapes, streaming with
// include_usage, greedy output equal to the CLI's, stop sequences, thinking deltas, errors.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { BASE, CLI_SYSTEM, PROMPT, cliGreedy, collect, modelId, openai, pickStop } from './helpers.mjs';

const N = 24;
// token counts only: prompt_tokens_details.cached_tokens legitimately differs between runs
const counts = (u) => [u.prompt_tokens, u.completion_tokens, u.total_tokens];
const noThink = { reasoning_effort: 'none', temperature: 0 };

async function greedy(extra = {}) {
  return openai.chat.completions.create({
    model: await modelId(),
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: N,
    ...noThink,
    ...extra,
  });
}

function checkCompletion(r, maxTokens) {
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.id, 'string');
  assert.ok(r.id.length > 0);
  assert.ok(Number.isInteger(r.created) && r.created > 1_600_000_000, `created ${r.created}`);
  assert.equal(typeof r.model, 'string');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 0 && r.usage.completion_tokens <= maxTokens);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, maxTokens);
}

test('chat non-stream: shape, usage, determinism', async () => {
  const a = await greedy();
  checkCompletion(a, N);
  assert.equal(typeof a.choices[0].message.content, 'string');
  assert.ok(a.choices[0].message.content.length > 0, 'greedy content is empty');
  const b = await greedy();
  assert.equal(b.choices[0].message.content, a.choices[0].message.content, 'greedy output differs between runs');
  assert.deepEqual(counts(b.usage), counts(a.usage));
  assert.notEqual(b.id, a.id, 'two completions share an id');
  // BOS <｜User｜> P <｜Assistant｜> </think>: the prompt is longer than its text alone
  const one = await greedy({ max_tokens: 1 });
  checkCompletion(one, 1);
  assert.equal(one.usage.prompt_tokens, a.usage.prompt_tokens);
  assert.ok(a.choices[0].message.content.startsWith(one.choices[0].message.content));
});

test('chat greedy output equals the CLI (--temp 0 --nothink)', async (t) => {
  const want = cliGreedy(PROMPT, N);
  if (want === null) return t.skip('DSV4_CLI / DSV4_MODEL_PATH not set');
  // the CLI renders its default system text after BOS; the server renders a system message there
  const r = await greedy({ messages: [{ role: 'system', content: CLI_SYSTEM }, { role: 'user', content: PROMPT }] });
  assert.equal(r.choices[0].message.content, want);
  // and with an empty system on both sides
  const want2 = cliGreedy(PROMPT, N, { system: '' });
  const r2 = await greedy();
  assert.equal(r2.choices[0].message.content, want2);
});

test('chat stream with include_usage', async () => {
  const ref = await greedy();
  const stream = await openai.chat.completions.create({
    model: await modelId(),
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: N,
    ...noThink,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = await collect(stream);
  assert.ok(chunks.length >= 3, `only ${chunks.length} chunks`);
  const id = chunks[0].id;
  let text = '';
  let finish = null;
  let usage = null;
  chunks.forEach((c, i) => {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, id, 'chunk ids differ');
    if (c.usage) {
      assert.equal(i, chunks.length - 1, 'usage chunk is not the last');
      assert.deepEqual(c.choices, []);
      usage = c.usage;
      return;
    }
    assert.equal(c.choices.length, 1);
    const ch = c.choices[0];
    if (i === 0) assert.equal(ch.delta.role, 'assistant');
    if (ch.delta.content) text += ch.delta.content;
    if (ch.finish_reason) {
      assert.equal(finish, null, 'two finish_reason chunks');
      finish = ch.finish_reason;
    }
  });
  assert.equal(text, ref.choices[0].message.content);
  assert.equal(finish, ref.choices[0].finish_reason);
  assert.ok(usage, 'no usage chunk with include_usage');
  assert.deepEqual(counts(usage), counts(ref.usage));

  // without include_usage no chunk carries usage
  const s2 = await openai.chat.completions.create({
    model: await modelId(),
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: 4,
    ...noThink,
    stream: true,
  });
  for (const c of await collect(s2)) assert.ok(!c.usage, 'usage sent without include_usage');
});

test('chat stop sequence cuts the output (stream and non-stream)', async (t) => {
  const ref = await greedy();
  const pick = pickStop(ref.choices[0].message.content);
  if (!pick) return t.skip('greedy output has no usable stop string');
  const r = await greedy({ stop: [pick.stop] });
  assert.equal(r.choices[0].message.content, pick.before);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const stream = await openai.chat.completions.create({
    model: await modelId(),
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: N,
    ...noThink,
    stop: pick.stop,
    stream: true,
  });
  let text = '';
  let finish;
  for (const c of await collect(stream)) {
    text += c.choices[0]?.delta?.content || '';
    finish = c.choices[0]?.finish_reason || finish;
  }
  assert.equal(text, pick.before);
  assert.equal(finish, 'stop');
});

test('chat seeded sampling is reproducible', async () => {
  const req = { temperature: 1, top_p: 0.9, seed: 1234, reasoning_effort: 'none' };
  const a = await greedy(req);
  const b = await greedy(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('chat thinking: reasoning is streamed separately from content', async () => {
  // default mode thinks (HIGH); the tiny random model rarely closes </think> in 16 tokens, so
  // all or most of the output is reasoning
  const r = await openai.chat.completions.create({
    model: await modelId(),
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: 16,
  });
  checkCompletion(r, 16);
  const m = r.choices[0].message;
  const reasoning = m.reasoning_content ?? '';
  assert.equal(typeof reasoning, 'string', 'thinking reply has no reasoning_content');
  assert.ok(reasoning.length + (m.content ?? '').length > 0);
  assert.ok(reasoning.length > 0, 'thinking mode produced no reasoning_content');
  const stream = await openai.chat.completions.create({
    model: await modelId(),
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: 16,
    stream: true,
  });
  let streamed = '';
  for (const c of await collect(stream)) streamed += c.choices[0]?.delta?.reasoning_content ?? '';
  assert.ok(streamed.length > 0, 'no reasoning_content deltas in thinking mode');
});

test('chat errors come back in the OpenAI shape', async () => {
  const model = await modelId();
  await assert.rejects(
    openai.chat.completions.create({ model, messages: [] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && typeof e.error?.message === 'string',
  );
  await assert.rejects(
    openai.chat.completions.create({ model, messages: [{ role: 'wizard', content: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && /role/.test(e.message),
  );
  await assert.rejects(
    openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }),
    (e) => e.status === 400 && e.param === 'temperature',
  );
  const bad = new OpenAI({ apiKey: 'x', baseURL: `${BASE}/v1/nope`, maxRetries: 0, timeout: 10_000 });
  await assert.rejects(bad.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }] }), (e) =>
    [404, 405].includes(e.status),
  );
});
