// End-to-end: what the official SDKs — `openai` and `@anthropic-ai/sdk` —
// make of the errors sluice makes itself (DESIGN.md §3 "No retry storms
// across layers", §8 "Errors as the SDKs read them").
//
//   - the exception's message names sluice's reason (budget exhausted,
//     invalid budget, connect error, circuit open, rate limited);
//   - an SDK with its default retries (2) does not stack them on sluice's:
//     one SDK call is one request to sluice once sluice has retried, or when
//     the wait (circuit cooldown, quota reset) does not fit the budget; and a
//     dead upstream sees at most 3 connection attempts per SDK call;
//   - a stream sluice cuts mid-way raises the SDK's APIError naming the
//     reason, not a bare "terminated".
//
//   SLUICE_BUILD_DIR=/path/to/build node --test errors.test.mjs

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { stopAll, startMock, startSluice, metric } from './harness.mjs';

const TEST_OPTS = { timeout: 30_000 }; // never hang CI; a 2 x 120 s SDK sleep fails here

// A port where nothing listens: bound, read, closed.
async function deadPort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

// An upstream that accepts every connection and closes it at once, counting them:
// the witness for "how many times did one SDK call reach the upstream".
async function closingUpstream() {
  const upstream = { connections: 0 };
  upstream.server = createServer((socket) => {
    upstream.connections++;
    socket.destroy();
  });
  await new Promise((r) => upstream.server.listen(0, '127.0.0.1', r));
  upstream.port = upstream.server.address().port;
  return upstream;
}

let main;     // sluice: / → mock-llm, /dead/ → nothing, /closing/ → closingUpstream
let circuit;  // sluice: / → mock-llm behind a breaker with a 120 s cooldown, 30 s budgets
let quota;    // sluice: / → mock-llm with quota throttling
let closing;

before(async () => {
  const mockUrl = await startMock();
  closing = await closingUpstream();
  const noBreaker = 'circuit_breaker: {consecutive_failures: 1000}';
  main = await startSluice(`upstreams:
  - {name: mock, url: ${mockUrl}}
  - {name: dead, url: "http://127.0.0.1:${await deadPort()}", ${noBreaker}}
  - {name: closing, url: "http://127.0.0.1:${closing.port}", ${noBreaker}}
routes:
  - {name: dead, match: {path_prefix: /dead/}, upstream: dead}
  - {name: closing, match: {path_prefix: /closing/}, upstream: closing}
  - {name: llm, match: {path_prefix: /}, upstream: mock}
`);
  circuit = await startSluice(`upstreams:
  - name: mock
    url: ${mockUrl}
    circuit_breaker: {consecutive_failures: 1, cooldown: 120s, max_cooldown: 120s}
routes:
  - name: llm
    match: {path_prefix: /}
    upstream: mock
    retry: {attempts: 1}
    budget: {default: 30s}
`);
  quota = await startSluice(`upstreams:
  - name: mock
    url: ${mockUrl}
    rate_limit: {key: none, reserve: 0}
routes:
  - {name: llm, match: {path_prefix: /}, upstream: mock, retry: {attempts: 1}}
`);
});

after(async () => {
  await stopAll();
  closing?.server.close();
});

// ---------------------------------------------------------------------------
// The two SDKs, each with its default retries (2) and a fetch that counts
// the HTTP requests it makes.

function sdks(sluice, prefix = '') {
  const counter = { calls: 0 };
  const fetchCounting = (url, init) => { counter.calls++; return fetch(url, init); };
  const openai = new OpenAI({ baseURL: `${sluice.url}${prefix}/v1`, apiKey: 'test', fetch: fetchCounting });
  const anthropic = new Anthropic({ baseURL: `${sluice.url}${prefix}`, apiKey: 'test', fetch: fetchCounting });
  return [
    {
      name: 'openai',
      counter,
      APIError: OpenAI.APIError,
      call: (headers) => openai.chat.completions.create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }, { headers }),
      stream: (headers) => openai.chat.completions.create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true },
        { headers }),
      text: (chunk) => chunk.choices[0]?.delta?.content ?? '',
    },
    {
      name: 'anthropic',
      counter,
      APIError: Anthropic.APIError,
      call: (headers) => anthropic.messages.create(
        { model: 'claude-haiku-4-5', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] },
        { headers }),
      stream: (headers) => anthropic.messages.create(
        { model: 'claude-haiku-4-5', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }],
          stream: true },
        { headers }),
      text: (event) => (event.type === 'content_block_delta' ? event.delta.text : ''),
    },
  ];
}

/** Runs `call`, which must fail; returns the error. */
async function failure(call) {
  try {
    await call();
  } catch (err) {
    return err;
  }
  assert.fail('the call succeeded');
}

// The SDK's exception must be its API error, with sluice's reason in its
// message, after exactly `calls` HTTP requests.
function assertNamesReason(sdk, err, status, slug, calls = 1) {
  assert.ok(err instanceof sdk.APIError, `${sdk.name}: expected APIError, got ${err}`);
  assert.equal(err.status, status, `${sdk.name}: ${err.message}`);
  assert.match(err.message, new RegExp(`sluice ${slug}: `), `${sdk.name}: ${err.message}`);
  assert.equal(sdk.counter.calls, calls, `${sdk.name} made ${sdk.counter.calls} request(s)`);
}

// ---------------------------------------------------------------------------

test('budget exhausted: both SDKs say budget-exhausted and do not retry', TEST_OPTS, async () => {
  for (const sdk of sdks(main)) {
    sdk.counter.calls = 0;
    const err = await failure(() => sdk.call({
      'x-budget-ms': '200', 'x-mock-stall-before-headers-ms': '10000',
    }));
    assertNamesReason(sdk, err, 504, 'budget-exhausted');
  }
});

test('invalid budget: both SDKs say invalid-budget', TEST_OPTS, async () => {
  for (const sdk of sdks(main)) {
    sdk.counter.calls = 0;
    const err = await failure(() => sdk.call({ 'x-budget-ms': 'soon' }));
    assertNamesReason(sdk, err, 400, 'invalid-budget');
    assert.match(err.message, /x-budget-ms must be a positive integer/);
  }
});

test('connect error: one SDK call makes at most 3 connect attempts and names the error', TEST_OPTS, async () => {
  for (const sdk of sdks(main, '/dead')) {
    sdk.counter.calls = 0;
    const before = await metric(main.adminUrl, 'sluice_upstream_attempts_total',
                                { upstream: 'dead', result: 'connect_error' });
    const err = await failure(() => sdk.call({}));
    assertNamesReason(sdk, err, 502, 'upstream-connect-error');
    const attempts = await metric(main.adminUrl, 'sluice_upstream_attempts_total',
                                  { upstream: 'dead', result: 'connect_error' }) - before;
    assert.ok(attempts >= 1 && attempts <= 3, `${sdk.name}: ${attempts} connect attempts`);
  }
});

test('an upstream that accepts and closes sees at most 3 connections per SDK call', TEST_OPTS, async () => {
  for (const sdk of sdks(main, '/closing')) {
    sdk.counter.calls = 0;
    const before = closing.connections;
    const err = await failure(() => sdk.call({}));
    assert.ok(err instanceof sdk.APIError, `${sdk.name}: ${err}`);
    assert.equal(err.status, 502, `${sdk.name}: ${err.message}`);
    assert.match(err.message, /sluice upstream-/, `${sdk.name}: ${err.message}`);
    assert.equal(sdk.counter.calls, 1, `${sdk.name} made ${sdk.counter.calls} request(s)`);
    const connections = closing.connections - before;
    assert.ok(connections >= 1 && connections <= 3, `${sdk.name}: ${connections} connections`);
  }
});

// Opens the `circuit` sluice's breaker (120 s cooldown) unless it is open already.
async function tripCircuit() {
  if (await metric(circuit.adminUrl, 'sluice_circuit_state', { upstream: 'mock' }) === 1) return;
  // One 500 from the mock (consecutive_failures: 1).
  const trip = await fetch(`${circuit.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-mock-status': '500' },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: [] }),
  });
  assert.equal(trip.status, 500);
  assert.equal(await metric(circuit.adminUrl, 'sluice_circuit_state', { upstream: 'mock' }), 1);
}

test('circuit open with a cooldown beyond the budget: one SDK call, circuit-open named', TEST_OPTS, async () => {
  await tripCircuit();
  for (const sdk of sdks(circuit)) {
    sdk.counter.calls = 0;
    const err = await failure(() => sdk.call({}));
    assertNamesReason(sdk, err, 503, 'circuit-open');
    assert.equal(err.headers.get?.('x-should-retry') ?? err.headers['x-should-retry'], 'false');
  }
});

// Retry-After ~119 s with a 180 s budget: the wait fits the budget, but a
// wait of 60 s or more is never the SDK's to sleep (some SDK versions sleep
// it whole, others retry at once into the same open circuit; each SDK retry
// starts a new budget). One SDK call, told not to retry.
test('circuit open with a long cooldown within the budget: one SDK call, no SDK retry', TEST_OPTS, async () => {
  await tripCircuit();
  for (const sdk of sdks(circuit)) {
    sdk.counter.calls = 0;
    const err = await failure(() => sdk.call({ 'x-budget-ms': '180000' }));
    assertNamesReason(sdk, err, 503, 'circuit-open');
    assert.equal(err.headers.get?.('x-should-retry') ?? err.headers['x-should-retry'], 'false');
    const retryAfter = Number(err.headers.get?.('retry-after') ?? err.headers['retry-after']);
    assert.ok(retryAfter >= 60 && retryAfter <= 120, `retry-after ${retryAfter}`);
  }
});

test('rate limited with a reset beyond the budget: one SDK call, rate-limited named', TEST_OPTS, async () => {
  const quotaHeaders = {
    'x-mock-quota': '1/60000', 'x-mock-quota-key': 'e2e-errors', 'x-mock-quota-style': 'openai',
  };
  const [openai] = sdks(quota);
  await openai.call(quotaHeaders);  // spends the quota: sluice now knows remaining 0 for 60 s
  for (const sdk of sdks(quota)) {
    sdk.counter.calls = 0;
    const err = await failure(() => sdk.call({ ...quotaHeaders, 'x-budget-ms': '5000' }));
    assertNamesReason(sdk, err, 429, 'rate-limited');
  }
});

// ---------------------------------------------------------------------------
// A stream sluice cuts: the SDK raises its API error naming the reason, after
// the tokens that did arrive.

test('budget cut mid-stream: both SDKs raise APIError naming budget-exhausted', TEST_OPTS, async () => {
  for (const sdk of sdks(main)) {
    const stream = await sdk.stream({
      'x-budget-ms': '1000', 'x-mock-tokens': '10',
      'x-mock-stall-after-tokens': '3', 'x-mock-stall-ms': '-1',
    });
    let text = '';
    const err = await failure(async () => {
      for await (const chunk of stream) text += sdk.text(chunk);
    });
    assert.equal(text, 'tok0 tok1 tok2 ', `${sdk.name}: the tokens before the cut`);
    assert.ok(err instanceof sdk.APIError, `${sdk.name}: expected APIError, got ${err}`);
    assert.match(err.message, /sluice budget-exhausted: /, `${sdk.name}: ${err.message}`);
  }
});

test('upstream reset mid-stream: the openai SDK raises APIError naming upstream-reset', TEST_OPTS, async () => {
  const [openai] = sdks(main);
  const stream = await openai.stream({ 'x-mock-tokens': '50', 'x-mock-reset-after-tokens': '3' });
  const err = await failure(async () => {
    for await (const chunk of stream) openai.text(chunk);
  });
  assert.ok(err instanceof OpenAI.APIError, `expected APIError, got ${err}`);
  assert.match(err.message, /sluice upstream-reset: /, err.message);
});
