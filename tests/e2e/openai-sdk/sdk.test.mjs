// End-to-end: the official `openai` npm SDK talks to sluice, sluice talks to
// tools/mock-llm. Every timing assertion is checked against mock-llm's ledger
// (what the upstream actually saw), never against sluice's own report.
//
//   SLUICE_BUILD_DIR=/path/to/build node --test     (default: ../../../build)

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import {
  sleep, stopAll, startMock, startSluice, metric as metricOf, waitMetric as waitMetricOf,
} from './harness.mjs';

const PROPAGATION_LIMIT_US = 50_000n; // the project's "done" criterion: 50 ms
const LEDGER_POLL_TIMEOUT_MS = 5_000;
const TEST_OPTS = { timeout: 30_000 }; // never hang CI

// ---------------------------------------------------------------------------
// Clock. mock-llm's ledger times are CLOCK_MONOTONIC microseconds. In Node,
// process.hrtime.bigint() is libuv's uv_hrtime(), which on Linux reads
// clock_gettime(CLOCK_MONOTONIC) in nanoseconds — the same clock, so a
// timestamp taken here can be subtracted from a ledger timestamp. The test
// "clock check" below verifies this empirically on every run (a request's
// ledger `received_us` must fall between our before/after readings) instead
// of trusting the documentation.
const nowUs = () => process.hrtime.bigint() / 1000n;

// ---------------------------------------------------------------------------
// Environment: mock-llm ← sluice ← SDK.
let mockUrl;      // http://127.0.0.1:PORT of mock-llm
let adminUrl;     // http://127.0.0.1:PORT of sluice's admin listener
let sluiceUrl;    // http://127.0.0.1:PORT of sluice's proxy listener
let client;       // OpenAI SDK client pointed at sluice
let sluiceProc;
let idSeq = 0;
const runTag = `${process.pid}-${Date.now()}`;
const uniqueId = (what) => `e2e-${what}-${runTag}-${++idSeq}`;

before(async () => {
  mockUrl = await startMock();
  const sluice = await startSluice(`upstreams:
  - name: mock
    url: ${mockUrl}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [POST]}
    upstream: mock
  - name: rest
    match: {path_prefix: /}
    upstream: mock
`);
  sluiceProc = sluice.child;
  sluiceUrl = sluice.url;
  adminUrl = sluice.adminUrl;

  client = new OpenAI({ baseURL: `${sluiceUrl}/v1`, apiKey: 'test', maxRetries: 0 });
});

after(stopAll);

// ---------------------------------------------------------------------------
// Helpers.
async function ledgerEntry(id) {
  const res = await fetch(`${mockUrl}/_ledger?id=${encodeURIComponent(id)}`);
  assert.equal(res.status, 200, 'GET /_ledger');
  const body = await res.json();
  return body.requests[0] ?? null;
}

// Polls the ledger until pred(entry) holds; returns that entry.
async function waitLedger(id, pred, what, timeoutMs = LEDGER_POLL_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  let last = null;
  for (;;) {
    last = await ledgerEntry(id);
    if (last && pred(last)) return last;
    if (Date.now() > deadline) {
      assert.fail(`ledger entry ${id}: ${what} not seen within ${timeoutMs} ms; last: ` +
                  JSON.stringify(last));
    }
    await sleep(2);
  }
}

const metric = (name, labels) => metricOf(adminUrl, name, labels);

const cancelSeries = {
  cancel_reason: 'client_disconnect', route: 'chat', upstream: 'mock',
};

const waitMetric = (name, labels, want) => waitMetricOf(adminUrl, name, labels, want);

const expectedText = (n) => Array.from({ length: n }, (_, i) => `tok${i} `).join('');
const isAbort = (e) => e instanceof OpenAI.APIUserAbortError || e?.name === 'AbortError';

const messages = [{ role: 'user', content: 'Say something.' }];

// ---------------------------------------------------------------------------
// Tests. node:test runs the top-level tests of a file one after another, in
// this order.

test('clock check: process.hrtime.bigint() is the ledger clock (CLOCK_MONOTONIC)', TEST_OPTS, async (t) => {
  // The first SDK call pays for connection setup and lazy module loading; the
  // later ones bracket the mock's timestamp within a few milliseconds.
  let tightest = null;
  for (let i = 0; i < 3; i++) {
    const id = uniqueId('clock');
    const t0 = nowUs();
    await client.chat.completions.create(
      { model: 'gpt-4o-mini', messages, max_tokens: 1 },
      { headers: { 'x-mock-request-id': id } },
    );
    const t1 = nowUs();
    const e = await waitLedger(id, (x) => x.received_us > 0, 'received_us');
    const received = BigInt(e.received_us);
    assert.ok(t0 <= received && received <= t1,
              `ledger received_us ${received} not within our [${t0}, ${t1}] — ` +
              'the clocks differ, propagation times below would be meaningless');
    if (tightest === null || t1 - t0 < tightest) tightest = t1 - t0;
  }
  t.diagnostic(`ledger received_us fell inside a ${Number(tightest) / 1000} ms window of our clock`);
});

test('non-streaming chat completion: content and usage', TEST_OPTS, async () => {
  const id = uniqueId('plain');
  const completion = await client.chat.completions.create(
    { model: 'gpt-4o-mini', messages },
    { headers: { 'x-mock-tokens': '7', 'x-mock-request-id': id } },
  );
  assert.equal(completion.object, 'chat.completion');
  assert.equal(completion.model, 'gpt-4o-mini');
  assert.equal(completion.choices.length, 1);
  assert.equal(completion.choices[0].message.role, 'assistant');
  assert.equal(completion.choices[0].message.content, expectedText(7));
  assert.equal(completion.choices[0].finish_reason, 'stop');

  const e = await waitLedger(id, (x) => x.completed, 'completed');
  assert.equal(completion.usage.completion_tokens, 7);
  assert.equal(completion.usage.prompt_tokens, e.input_tokens, 'prompt_tokens = ledger input_tokens');
  assert.equal(completion.usage.total_tokens, e.input_tokens + 7);
  assert.equal(e.tokens_emitted, 7);
  assert.equal(e.stream, false);
});

test('streaming chat completion: every token in order, usage chunk, x-sluice-attempts', TEST_OPTS, async () => {
  const N = 25;
  const id = uniqueId('stream');
  const { data: stream, response } = await client.chat.completions.create(
    {
      model: 'gpt-4o-mini', messages, stream: true, stream_options: { include_usage: true },
    },
    { headers: { 'x-mock-tokens': String(N), 'x-mock-request-id': id } },
  ).withResponse();

  assert.equal(response.status, 200);
  assert.equal(response.headers.get('x-sluice-attempts'), '1');
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);

  const contents = [];
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    const delta = chunk.choices[0]?.delta?.content;
    if (delta) contents.push(delta);
  }
  assert.deepEqual(contents, Array.from({ length: N }, (_, i) => `tok${i} `));
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');

  const withFinish = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(withFinish.length, 1);
  assert.equal(withFinish[0].choices[0].finish_reason, 'stop');

  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.ok(last.usage, 'final chunk carries usage');
  assert.equal(last.usage.completion_tokens, N);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);

  const e = await waitLedger(id, (x) => x.completed, 'completed');
  assert.equal(last.usage.prompt_tokens, e.input_tokens);
  assert.equal(last.usage.total_tokens, e.input_tokens + N);
  assert.equal(e.tokens_emitted, N);
  assert.equal(e.usage_reported, true);
});

test('AbortController mid-stream closes the upstream within 50 ms (mock-llm ledger)', TEST_OPTS, async (t) => {
  const id = uniqueId('abort-stream');
  const cancelledBefore = await metric('sluice_cancellations_total', cancelSeries);
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model: 'gpt-4o-mini', messages, stream: true, stream_options: { include_usage: true } },
    {
      signal: controller.signal,
      headers: {
        'x-mock-tokens': '2000',
        'x-mock-token-interval-ms': '5',
        'x-mock-request-id': id,
      },
    },
  );

  // Read a few chunks, then abort with the caller's AbortController while the
  // iterator is still live (a `break` would make the SDK abort on its own).
  const READ_BEFORE_ABORT = 5;
  let received = 0;        // content tokens handed to us before the abort
  let afterAbort = 0;      // chunks the SDK still yielded after the abort
  let abortUs = null;
  try {
    for await (const chunk of stream) {
      if (abortUs !== null) { afterAbort++; continue; }
      if (chunk.choices[0]?.delta?.content) received++;
      if (received === READ_BEFORE_ABORT) {
        abortUs = nowUs();
        controller.abort();
      }
    }
  } catch (err) {
    if (!isAbort(err)) throw err;
  }
  assert.notEqual(abortUs, null, 'stream ended before the abort');

  const e = await waitLedger(id, (x) => x.peer_closed, 'peer_closed');
  const propagationUs = BigInt(e.peer_closed_us) - abortUs;
  t.diagnostic(`abort -> mock saw close: ${Number(propagationUs) / 1000} ms; ` +
               `client received ${received} tokens, mock emitted ${e.tokens_emitted}, ` +
               `SDK yielded ${afterAbort} chunk(s) after the abort`);
  assert.ok(propagationUs >= 0n, `peer_closed_us before the abort?! (${propagationUs} us)`);
  assert.ok(propagationUs < PROPAGATION_LIMIT_US,
            `upstream closed ${propagationUs} us after the abort (limit ${PROPAGATION_LIMIT_US})`);
  assert.equal(e.completed, false);
  assert.equal(e.usage_reported, false);
  assert.ok(e.tokens_emitted >= received, `mock emitted ${e.tokens_emitted} < ${received} received`);
  assert.ok(e.tokens_emitted - received <= 5,
            `mock emitted ${e.tokens_emitted - received} tokens beyond the ${received} the client got`);

  const cancelled = await waitMetric('sluice_cancellations_total', cancelSeries, cancelledBefore + 1);
  assert.equal(cancelledBefore, 0);
  assert.equal(cancelled, 1, 'sluice_cancellations_total{client_disconnect,chat,mock}');
});

test('AbortController before the first byte closes the upstream within 50 ms', TEST_OPTS, async (t) => {
  const id = uniqueId('abort-ttfb');
  const cancelledBefore = await metric('sluice_cancellations_total', cancelSeries);
  const controller = new AbortController();
  const pending = client.chat.completions.create(
    { model: 'gpt-4o-mini', messages, stream: true },
    {
      signal: controller.signal,
      headers: { 'x-mock-stall-before-headers-ms': '10000', 'x-mock-request-id': id },
    },
  );
  // Observe the rejection at once so it is never reported as unhandled.
  const outcome = pending.then(() => null, (err) => err);

  // The mock records the request once it has been fully received: from then
  // on sluice is waiting for the first byte.
  await waitLedger(id, () => true, 'request arrival');
  const abortUs = nowUs();
  controller.abort();

  const err = await outcome;
  assert.ok(err, 'create() resolved although the request was aborted');
  assert.ok(err instanceof OpenAI.APIUserAbortError, `expected APIUserAbortError, got ${err}`);

  const e = await waitLedger(id, (x) => x.peer_closed, 'peer_closed');
  const propagationUs = BigInt(e.peer_closed_us) - abortUs;
  t.diagnostic(`abort -> mock saw close: ${Number(propagationUs) / 1000} ms`);
  assert.ok(propagationUs >= 0n, `peer_closed_us before the abort?! (${propagationUs} us)`);
  assert.ok(propagationUs < PROPAGATION_LIMIT_US,
            `upstream closed ${propagationUs} us after the abort (limit ${PROPAGATION_LIMIT_US})`);
  assert.equal(e.headers_sent_us, 0, 'the mock had not answered yet');
  assert.equal(e.completed, false);

  const cancelled = await waitMetric('sluice_cancellations_total', cancelSeries, cancelledBefore + 1);
  assert.equal(cancelled, cancelledBefore + 1, 'sluice_cancellations_total{client_disconnect,chat,mock}');
});

test('sluice is still healthy after the aborts', TEST_OPTS, async () => {
  const completion = await client.chat.completions.create(
    { model: 'gpt-4o-mini', messages },
    { headers: { 'x-mock-tokens': '3' } },
  );
  assert.equal(completion.choices[0].message.content, expectedText(3));
  assert.equal(sluiceProc.exitCode, null, 'sluice exited');
});
