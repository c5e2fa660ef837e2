// OpenAI completions (raw prompt) and models through the official SDK.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { PROMPT, collect, http, modelId, openai } from './helpers.mjs';

const N = 16;
// What the server renders for a chat with one user message and thinking off (spec §5.4); the
// completions endpoint prepends only BOS, so both prompts are the same tokens.
const RENDERED = `<｜User｜>${PROMPT}<｜Assistant｜></think>`;

test('models list and retrieve', async () => {
  const list = await openai.models.list();
  assert.ok(list.data.length >= 1);
  for (const m of list.data) {
    assert.equal(m.object, 'model');
    assert.equal(typeof m.id, 'string');
    assert.ok(m.id.length > 0);
    assert.equal(typeof m.owned_by, 'string');
    assert.ok(Number.isInteger(m.created));
  }
  const id = list.data[0].id;
  const one = await openai.models.retrieve(id);
  assert.equal(one.id, id);
  assert.equal(one.object, 'model');
  await assert.rejects(openai.models.retrieve('no-such-model-xyz'), (e) => e instanceof OpenAI.NotFoundError);
  const raw = await http('GET', '/v1/models/no-such-model-xyz');
  assert.equal(raw.status, 404);
  assert.equal(typeof raw.json?.error?.message, 'string');
});

test('health', async () => {
  const r = await http('GET', '/health');
  assert.equal(r.status, 200);
});

test('completions non-stream and stream agree', async () => {
  const model = await modelId();
  const a = await openai.completions.create({ model, prompt: RENDERED, max_tokens: N, temperature: 0 });
  assert.equal(a.object, 'text_completion');
  assert.equal(typeof a.id, 'string');
  assert.equal(a.choices.length, 1);
  assert.equal(a.choices[0].index, 0);
  assert.equal(typeof a.choices[0].text, 'string');
  assert.ok(a.choices[0].text.length > 0);
  assert.ok(['stop', 'length'].includes(a.choices[0].finish_reason));
  assert.ok(a.usage.prompt_tokens > 0 && a.usage.completion_tokens <= N);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);

  const stream = await openai.completions.create({
    model,
    prompt: RENDERED,
    max_tokens: N,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish;
  let usage;
  for (const c of await collect(stream)) {
    assert.equal(c.object, 'text_completion');
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.text ?? '';
      finish = ch.finish_reason || finish;
    }
  }
  assert.equal(text, a.choices[0].text);
  assert.equal(finish, a.choices[0].finish_reason);
  // cached_tokens differs (the second run reuses the first's prefix); the counts may not
  assert.deepEqual([usage.prompt_tokens, usage.completion_tokens, usage.total_tokens], [a.usage.prompt_tokens, a.usage.completion_tokens, a.usage.total_tokens]);
});

test('completions on the rendered chat prompt equal the chat reply', async () => {
  const model = await modelId();
  const c = await openai.completions.create({ model, prompt: RENDERED, max_tokens: N, temperature: 0 });
  const chat = await openai.chat.completions.create({
    model,
    messages: [{ role: 'user', content: PROMPT }],
    max_tokens: N,
    temperature: 0,
    reasoning_effort: 'none',
  });
  assert.equal(c.choices[0].text, chat.choices[0].message.content);
  assert.equal(c.usage.prompt_tokens, chat.usage.prompt_tokens);
});
