// End-to-end: a run stopped through sluice, as the official SDKs see it
// (docs/guide/runs.md). An agent gives every request of a run the run's id
// (`defaultHeaders: { 'x-run-id': ... }`); the admin cancel stops the run's
// four streams in flight and each SDK raises its API error naming
// run-cancelled; the run's next call is refused 409 and not retried by the
// SDK. A run that reaches its spend cap (`x-run-max-usd`) ends its stream
// with the SDK's API error naming run-spend-exhausted, and its next call is
// refused 402 and not retried. (That the upstream streams are closed is
// checked against mock-llm's ledger in tests/integration/runs_test.cc.)
//
//   SLUICE_BUILD_DIR=/path/to/build node --test runs.test.mjs

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { stopAll, startMock, startSluice, waitMetric } from './harness.mjs';

const TEST_OPTS = { timeout: 30_000 };

let sluice;
let mockUrl;

before(async () => {
  mockUrl = await startMock();
  sluice = await startSluice(`upstreams:
  - {name: mock, url: ${mockUrl}}
routes:
  - {name: llm, match: {path_prefix: /}, upstream: mock, retry: {attempts: 1}}
runs: {}
pricing:
  - {model: "gpt-4o-mini", input: 0, output: 1000}
`);
});

after(stopAll);

function clients(runId) {
  const counter = { calls: 0 };
  const fetchCounting = (url, init) => { counter.calls++; return fetch(url, init); };
  const defaultHeaders = { 'x-run-id': runId };
  const openai = new OpenAI({ baseURL: `${sluice.url}/v1`, apiKey: 'test', defaultHeaders,
                              fetch: fetchCounting });
  const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: 'test', defaultHeaders,
                                    fetch: fetchCounting });
  const messages = [{ role: 'user', content: 'hi' }];
  return [
    {
      name: 'openai', counter, APIError: OpenAI.APIError,
      stream: (headers) => openai.chat.completions.create(
        { model: 'gpt-4o-mini', messages, stream: true }, { headers }),
      call: () => openai.chat.completions.create({ model: 'gpt-4o-mini', messages }),
    },
    {
      name: 'anthropic', counter, APIError: Anthropic.APIError,
      stream: (headers) => anthropic.messages.create(
        { model: 'claude-haiku-4-5', max_tokens: 1000, messages, stream: true }, { headers }),
      call: () => anthropic.messages.create({ model: 'claude-haiku-4-5', max_tokens: 100, messages }),
    },
  ];
}

test('a run cancelled through the admin port stops its four streams in both SDKs', TEST_OPTS, async () => {
  let cancelled = 0;
  for (const name of ['openai', 'anthropic']) {
    const runId = `${name}-run`;
    const client = clients(runId).find((c) => c.name === name);
    const ids = [0, 1, 2, 3].map((i) => `${runId}-${i}`);
    // Four streams of the run, each under way (its first chunk read).
    const streams = await Promise.all(ids.map((id) => client.stream({
      'x-mock-tokens': '1000', 'x-mock-token-interval-ms': '20', 'x-mock-request-id': id,
    })));
    const iterators = streams.map((s) => s[Symbol.asyncIterator]());
    await Promise.all(iterators.map((it) => it.next()));

    const res = await fetch(`${sluice.adminUrl}/runs/${runId}/cancel`,
                            { method: 'POST', headers: { 'x-sluice-admin': '1' } });
    assert.equal(res.status, 202, await res.text());

    for (const it of iterators) {
      let err;
      try {
        for (;;) {
          const { done } = await it.next();
          if (done) break;
        }
      } catch (e) {
        err = e;
      }
      assert.ok(err instanceof client.APIError, `${name}: expected APIError, got ${err}`);
      assert.match(err.message, /sluice run-cancelled: /, `${name}: ${err.message}`);
    }
    cancelled += 4;
    assert.equal(await waitMetric(sluice.adminUrl, 'sluice_cancellations_total',
                                  { route: 'llm', cancel_reason: 'run_cancelled' }, cancelled), cancelled);

    // The run's next call: 409, and the SDK does not retry it.
    client.counter.calls = 0;
    let refused;
    try {
      await client.call();
    } catch (e) {
      refused = e;
    }
    assert.ok(refused instanceof client.APIError, `${name}: expected APIError, got ${refused}`);
    assert.equal(refused.status, 409, `${name}: ${refused.message}`);
    assert.match(refused.message, /sluice run-cancelled: /, `${name}: ${refused.message}`);
    assert.equal(client.counter.calls, 1, `${name} retried a cancelled run's call`);
  }
});

test('a run at its spend cap ends its stream and its next call is 402, not retried', TEST_OPTS, async () => {
  const client = clients('capped-run').find((c) => c.name === 'openai');
  // $1000 per million output tokens: the $0.02 cap is 20 tokens.
  const stream = await client.stream({
    'x-run-max-usd': '0.02', 'x-mock-tokens': '1000', 'x-mock-token-interval-ms': '2',
  });
  let err;
  let chunks = 0;
  try {
    for await (const _ of stream) chunks++;
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof client.APIError, `expected APIError, got ${err}`);
  assert.match(err.message, /sluice run-spend-exhausted: /, err.message);
  assert.ok(chunks >= 20 && chunks < 1000, `chunks before the cut: ${chunks}`);

  client.counter.calls = 0;
  let refused;
  try {
    await client.call();
  } catch (e) {
    refused = e;
  }
  assert.ok(refused instanceof client.APIError, `expected APIError, got ${refused}`);
  assert.equal(refused.status, 402, refused.message);
  assert.match(refused.message, /sluice run-spend-exhausted: /, refused.message);
  assert.equal(client.counter.calls, 1, 'the SDK retried a capped run\'s call');
});
