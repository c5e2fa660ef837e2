// Shared setup for the SDK tests: clients pointed at the server under test, raw HTTP helpers with
// timeouts, the /metrics reader and the CLI reference run. Everything talks to 127.0.0.1 only.
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

export const BASE = process.env.DSV4_BASE_URL || 'http://127.0.0.1:8000';
if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(BASE)) throw new Error(`DSV4_BASE_URL must be http://127.0.0.1:PORT, got ${BASE}`);
export const API_KEY = process.env.DSV4_API_KEY || 'sk-dsv4-test';
export const CLI = process.env.DSV4_CLI || '';
export const MODEL_PATH = process.env.DSV4_MODEL_PATH || '';
const TIMEOUT_MS = 60_000;

export const openai = new OpenAI({ apiKey: API_KEY, baseURL: `${BASE}/v1`, maxRetries: 0, timeout: TIMEOUT_MS });
export const anthropic = new Anthropic({ apiKey: API_KEY, baseURL: BASE, maxRetries: 0, timeout: TIMEOUT_MS });

// The prompt every API renders the same way without thinking: BOS <｜User｜>P <｜Assistant｜></think>.
export const PROMPT = 'Hello! Tell me a short story.';
// The CLI's default system text (spec §5.4); the CLI renders it right after BOS, as the server
// renders a system message.
export const CLI_SYSTEM = 'You are a helpful assistant';

export async function http(method, path, { body, headers = {}, timeoutMs = TIMEOUT_MS } = {}) {
  const h = { ...headers };
  let data = body;
  if (body !== undefined && typeof body !== 'string' && !(body instanceof Uint8Array)) {
    data = JSON.stringify(body);
    h['content-type'] ??= 'application/json';
  }
  const res = await fetch(`${BASE}${path}`, { method, headers: h, body: data, signal: AbortSignal.timeout(timeoutMs) });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

let cachedModel;
export async function modelId() {
  if (!cachedModel) {
    const list = await openai.models.list();
    assert.ok(list.data.length >= 1, 'GET /v1/models lists no model');
    cachedModel = list.data[0].id;
  }
  return cachedModel;
}

// Prometheus text exposition -> Map(name{labels} -> number).
export async function metrics() {
  const r = await http('GET', '/metrics');
  assert.equal(r.status, 200, `GET /metrics -> ${r.status}: ${r.text.slice(0, 200)}`);
  const m = new Map();
  for (const line of r.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    const v = Number(line.slice(sp + 1));
    if (sp > 0 && Number.isFinite(v)) m.set(line.slice(0, sp).trim(), v);
  }
  return m;
}

export function metric(m, name) {
  let sum = 0;
  let found = false;
  for (const [k, v] of m) {
    if (k === name || k.startsWith(`${name}{`)) {
      sum += v;
      found = true;
    }
  }
  assert.ok(found, `metric ${name} missing from GET /metrics (have: ${[...m.keys()].join(', ')})`);
  return sum;
}

// Greedy, non-thinking CLI output for the same prompt (the CLI prints a final newline).
export function cliGreedy(prompt, n, { system } = {}) {
  if (!CLI || !MODEL_PATH) return null;
  const args = ['-m', MODEL_PATH, '-p', prompt, '-n', String(n), '--temp', '0', '--nothink'];
  if (system !== undefined) args.push('--system', system);
  const out = execFileSync(CLI, args, { timeout: 60_000, maxBuffer: 1 << 24, stdio: ['ignore', 'pipe', 'pipe'] });
  return out.toString('utf8').replace(/\n$/, '');
}

// A short ASCII stop string from the middle of text, and the text before its first occurrence.
export function pickStop(text) {
  for (let k = Math.floor(text.length / 3); k + 3 <= text.length; k++) {
    const s = text.slice(k, k + 3);
    if (!/^[A-Za-z]{3}$/.test(s)) continue;
    const first = text.indexOf(s);
    if (first > 0) return { stop: s, before: text.slice(0, first) };
  }
  return null;
}

export const WEATHER_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer' } },
  required: ['city'],
};

// Collects an async iterable (an SDK stream) with a bound on its length.
export async function collect(stream, max = 100_000) {
  const out = [];
  for await (const ev of stream) {
    out.push(ev);
    if (out.length > max) throw new Error(`stream longer than ${max} events`);
  }
  return out;
}

// Anthropic usage: input_tokens excludes cache reads and writes; the prompt is all three.
export const inputTokens = (u) =>
  u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
