// The official MCP TypeScript SDK through sluice: its Client over Streamable
// HTTP, to a stateless Streamable HTTP McpServer behind a `protocol: mcp`
// route, once answering in event streams and once in application/json
// bodies. What a reviewer checks by hand: tools/list and tools/call pass
// through, a streamed call's progress notifications too; a tool's own error
// counts as `tool_error`; a destructive tool answered 503 is called exactly
// once while a read-only one is retried; a tool budget overrun reaches the
// agent as an McpError -32001 carrying sluice's message; the budget and a
// client that leaves both fire the tool handler's AbortSignal (closing the
// stream is the cancel). Then a session-ful server (the SDK's
// StreamableHTTPServerTransport with a sessionIdGenerator), two instances
// behind one upstream: a session's requests stay on the instance that issued
// it, and a tool handler's AbortSignal fires when sluice cancels the call
// (its tool budget, a client that leaves), through the
// notifications/cancelled sluice sends with the session id. The time from
// the cancel to the AbortSignal is printed (`# ...`), not asserted.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

import { metric, sleep, startSluice, stopAll, waitMetric } from '../openai-sdk/harness.mjs';

// --- a stateless Streamable HTTP MCP server -------------------------------------
// A fresh McpServer and transport per request (the SDK's stateless pattern:
// closing the response stream is the cancel, and the transport's close fires
// the handler's AbortSignal). It answers in an event stream, or with
// `json: true` in one application/json body (the SDK's enableJsonResponse).
// In front of it, a test hook: tools/call is counted per tool, and a tool
// armed with failNext() gets one plain HTTP 503 instead of an answer.

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

async function waitFor(fact, what, timeoutMs = 5_000) {
  const until = Date.now() + timeoutMs;
  while (!fact()) {
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const text = (t) => ({ content: [{ type: 'text', text: t }] });

// A tool handler that ends only when its AbortSignal fires; it records in
// `record.started` / `record.aborted` when it started and when (and why) the
// signal fired.
const untilCancelled = (record, tool) => async (_args, extra) => {
  const entry = { tool, requestId: extra.requestId, startedAt: Date.now() };
  record.started.push(entry);
  await new Promise((resolve) => {
    const done = () => {
      record.aborted.push({ ...entry, abortedAt: Date.now(), reason: `${extra.signal.reason}` });
      resolve();
    };
    if (extra.signal.aborted) done();
    else extra.signal.addEventListener('abort', done, { once: true });
  });
  return text('cancelled');
};

// A raw tools/call of `wait` (id `id`) that the client abandons once the
// handler started: the connection closes (the SDK client would send its own
// notifications/cancelled; an agent that crashes does not). Resolves when the
// handler's AbortSignal fired, with that record and the time the client left.
async function leaveMidCall(url, record, id, headers = {}) {
  const before = record.started.length;
  const controller = new AbortController();
  const pending = fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
      ...headers,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call',
                           params: { name: 'wait', arguments: {} } }),
    signal: controller.signal,
  }).catch(() => {});  // the abort below also ends a body under way
  await waitFor(() => record.started.length > before, 'the wait handler to start');
  const leftAt = Date.now();
  controller.abort();
  await pending;
  await waitFor(() => record.aborted.some((x) => x.requestId === id),
                'the AbortSignal of the abandoned call');
  return { aborted: record.aborted.find((x) => x.requestId === id), leftAt };
}

async function startMcpServer({ json }) {
  const state = { calls: new Map(), failNext: new Set(), started: [], aborted: [] };
  const buildServer = () => {
    const server = new McpServer({ name: 'e2e-tools', version: '1.0.0' });
    server.registerTool('echo', {
      description: 'Echoes its input',
      inputSchema: { message: z.string() },
    }, async ({ message }) => text(`echo: ${message}`));
    server.registerTool('read_docs', {
      description: 'Reads documentation',
      inputSchema: { topic: z.string() },
      annotations: { readOnlyHint: true },
    }, async ({ topic }) => text(`docs about ${topic}`));
    server.registerTool('drop_table', {
      description: 'Drops a table',
      inputSchema: { table: z.string() },
      annotations: { readOnlyHint: false, destructiveHint: true },
    }, async ({ table }) => text(`dropped ${table}`));
    server.registerTool('slow_report', {
      description: 'Takes its time',
      inputSchema: {},
      annotations: { readOnlyHint: true },
    }, untilCancelled(state, 'slow_report'));
    server.registerTool('wait', { description: 'Waits for its cancel', inputSchema: {} },
                        untilCancelled(state, 'wait'));
    server.registerTool('count', {
      description: 'Counts to three, reporting progress',
      inputSchema: {},
    }, async (_args, extra) => {
      for (let i = 1; i <= 3; i += 1) {
        await extra.sendNotification({
          method: 'notifications/progress',
          params: { progressToken: extra._meta?.progressToken, progress: i, total: 3 },
        });
        await sleep(20);
      }
      return text('three');
    });
    server.registerTool('failing', { description: 'Always fails', inputSchema: {} },
                        async () => { throw new Error('the disk is full'); });
    return server;
  };
  const http = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const raw = await readBody(req);
    const body = JSON.parse(raw);
    if (body.method === 'tools/call') {
      const name = body.params?.name;
      state.calls.set(name, (state.calls.get(name) ?? 0) + 1);
      if (state.failNext.delete(name)) {
        res.writeHead(503, { 'content-type': 'text/plain' }).end('busy');
        return;
      }
    }
    const server = buildServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: json,
    });
    res.on('close', () => { transport.close(); server.close(); });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise((r) => http.listen(0, '127.0.0.1', r));
  return { ...state, http, url: `http://127.0.0.1:${http.address().port}` };
}

// --- the tests ------------------------------------------------------------------

for (const json of [false, true]) {
  const answers = json ? 'application/json answers' : 'event-stream answers';
  describe(`MCP SDK client and a stateless server through sluice (${answers})`, () => {
    let upstream;
    let sluice;
    let client;
    const toolCalls = (tool, outcome) =>
      metric(sluice.adminUrl, 'sluice_tool_calls_total', { route: 'tools', tool, outcome });

    before(async () => {
      upstream = await startMcpServer({ json });
      sluice = await startSluice(`upstreams:
  - name: tool-server
    url: ${upstream.url}
routes:
  - name: tools
    match: {path_prefix: /mcp}
    upstream: tool-server
    protocol: mcp
    retry: {attempts: 3, backoff: {base: 0s, max: 0s}}
    tools:
      - {name: slow_report, budget: 300ms}
    tool_retry: annotations
`);
      client = new Client({ name: 'e2e-agent', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${sluice.url}/mcp`)));
    });

    after(async () => {
      await client?.close().catch(() => {});
      upstream?.http.closeAllConnections?.();
      upstream?.http.close();
      await stopAll();
    });

    test('tools/list passes through with the annotations', async () => {
      const { tools } = await client.listTools();
      const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
      assert.deepEqual(Object.keys(byName).sort(),
                       ['count', 'drop_table', 'echo', 'failing', 'read_docs', 'slow_report', 'wait']);
      assert.equal(byName.read_docs.annotations.readOnlyHint, true);
      assert.equal(byName.drop_table.annotations.destructiveHint, true);
    });

    test('tools/call passes through', async () => {
      const result = await client.callTool({ name: 'echo', arguments: { message: 'hi' } });
      assert.deepEqual(result.content, [{ type: 'text', text: 'echo: hi' }]);
      assert.equal(await toolCalls('other', 'ok'), 1);
    });

    if (!json) {
      test('a streamed tools/call passes its progress notifications through as they come', async () => {
        const progress = [];
        const result = await client.callTool({ name: 'count', arguments: {} }, undefined, {
          onprogress: (p) => progress.push(p.progress),
        });
        assert.deepEqual(result.content, [{ type: 'text', text: 'three' }]);
        assert.deepEqual(progress, [1, 2, 3]);
      });
    }

    test("a tool's own error is counted as tool_error, not ok", async () => {
      const result = await client.callTool({ name: 'failing', arguments: {} });
      assert.equal(result.isError, true);
      assert.match(result.content[0].text, /the disk is full/);
      assert.equal(await toolCalls('other', 'tool_error'), 1);
    });

    test('a destructive tool answered 503 is called exactly once', async () => {
      upstream.failNext.add('drop_table');
      // The server's own 503 reaches the client (the SDK's transport error carries its body).
      await assert.rejects(client.callTool({ name: 'drop_table', arguments: { table: 'users' } }),
                           (e) => e.code === 503 && /busy/.test(e.message));
      assert.equal(upstream.calls.get('drop_table'), 1);
    });

    test('a read-only tool answered 503 is retried', async () => {
      upstream.failNext.add('read_docs');
      const result = await client.callTool({ name: 'read_docs', arguments: { topic: 'sluice' } });
      assert.deepEqual(result.content, [{ type: 'text', text: 'docs about sluice' }]);
      assert.equal(upstream.calls.get('read_docs'), 2);
    });

    test("a tool budget overrun is McpError -32001 with sluice's message and fires the handler's AbortSignal", async () => {
      const err = await client.callTool({ name: 'slow_report', arguments: {} }).then(
        () => assert.fail('slow_report should not succeed'), (e) => e);
      const answeredAt = Date.now();
      assert.ok(err instanceof McpError, `not an McpError: ${err}`);
      assert.equal(err.code, -32001);
      assert.match(err.message, /sluice budget-exhausted: /);
      assert.equal(err.data?.cancel_reason, 'budget_exhausted');
      assert.equal(await toolCalls('slow_report', 'budget_exhausted'), 1);
      // Closing the upstream stream is the cancel (no session, no notification).
      await waitFor(() => upstream.aborted.some((x) => x.tool === 'slow_report'),
                    'the AbortSignal of slow_report');
      const aborted = upstream.aborted.find((x) => x.tool === 'slow_report');
      console.log(`${answers}: the budget fired the tool's AbortSignal ` +
                  `${aborted.abortedAt - aborted.startedAt} ms after the call started ` +
                  `(budget 300 ms; the client had its error ${answeredAt - aborted.startedAt} ms after)`);
    });

    test("a client that leaves fires the handler's AbortSignal", async () => {
      const { aborted, leftAt } = await leaveMidCall(`${sluice.url}/mcp`, upstream, 'left-1');
      console.log(`${answers}: a client that left fired the tool's AbortSignal ` +
                  `${aborted.abortedAt - leftAt} ms after it closed its connection`);
      assert.equal(await waitMetric(sluice.adminUrl, 'sluice_tool_calls_total',
                                    { route: 'tools', tool: 'other', outcome: 'client_disconnect' },
                                    1), 1);
    });
  });
}

// --- session-ful servers --------------------------------------------------------
// The SDK's session-ful pattern: a transport per session, kept by its id; a
// request naming a session this instance did not issue gets 404 (the MCP
// spec's answer to an unknown session). `wait` and `budgeted_wait` record
// their AbortSignal and end only when it fires.

async function startSessionServer(name) {
  const instance = { name, transports: new Map(), requests: 0, started: [], aborted: [] };
  const build = () => {
    const server = new McpServer({ name: `session-tools-${name}`, version: '1.0.0' });
    server.registerTool('whoami', { description: 'Names the instance', inputSchema: {} },
                        async () => text(name));
    for (const tool of ['wait', 'budgeted_wait']) {
      server.registerTool(tool, { description: 'Waits for its cancel', inputSchema: {} },
                          untilCancelled(instance, tool));
    }
    return server;
  };
  const http = createServer(async (req, res) => {
    const raw = req.method === 'POST' ? await readBody(req) : '';
    const body = raw ? JSON.parse(raw) : undefined;
    const sid = req.headers['mcp-session-id'];
    if (sid !== undefined) {
      const transport = instance.transports.get(sid);
      if (!transport) {
        res.writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
        return;
      }
      instance.requests += 1;
      await transport.handleRequest(req, res, body);
      return;
    }
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => `${name}-${randomUUID()}`,
      onsessioninitialized: (id) => { instance.transports.set(id, transport); },
    });
    transport.onclose = () => { if (transport.sessionId) instance.transports.delete(transport.sessionId); };
    await build().connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise((r) => http.listen(0, '127.0.0.1', r));
  instance.http = http;
  instance.url = `http://127.0.0.1:${http.address().port}`;
  return instance;
}

describe('MCP SDK session-ful servers through sluice', () => {
  let a;
  let b;
  let sluice;
  const clients = [];

  before(async () => {
    a = await startSessionServer('a');
    b = await startSessionServer('b');
    sluice = await startSluice(`upstreams:
  - name: session-tools
    endpoints:
      - {name: a, url: "${a.url}"}
      - {name: b, url: "${b.url}"}
routes:
  - name: tools
    match: {path_prefix: /mcp}
    upstream: session-tools
    protocol: mcp
    tools:
      - {name: budgeted_wait, budget: 300ms}
`);
  });

  after(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const s of [a, b]) {
      s?.http.closeAllConnections?.();
      s?.http.close();
    }
    await stopAll();
  });

  async function connect() {
    const client = new Client({ name: 'e2e-session-agent', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${sluice.url}/mcp`));
    await client.connect(transport);
    clients.push(client);
    return { client, transport };
  }
  const ownerOf = (sid) => (sid.startsWith('a-') ? a : b);

  test('a session stays on the instance that issued it', async () => {
    for (let i = 0; i < 4; i += 1) {
      const { client, transport } = await connect();
      const sid = transport.sessionId;
      assert.ok(sid, 'the server issued a session id');
      for (let j = 0; j < 5; j += 1) {
        // The other instance would answer 404 (Session not found).
        const result = await client.callTool({ name: 'whoami', arguments: {} });
        assert.deepEqual(result.content, [{ type: 'text', text: ownerOf(sid).name }]);
      }
    }
  });

  test("sluice's tool budget fires the handler's AbortSignal", async () => {
    const { client } = await connect();
    const err = await client.callTool({ name: 'budgeted_wait', arguments: {} }).then(
      () => assert.fail('budgeted_wait should not succeed'), (e) => e);
    assert.ok(err instanceof McpError, `not an McpError: ${err}`);
    assert.equal(err.code, -32001);
    await waitFor(() => [...a.aborted, ...b.aborted].some((x) => x.tool === 'budgeted_wait'),
                  'the AbortSignal of budgeted_wait');
    const aborted = [...a.aborted, ...b.aborted].find((x) => x.tool === 'budgeted_wait');
    assert.match(aborted.reason, /sluice budget_exhausted/);
    assert.equal(await waitMetric(sluice.adminUrl, 'sluice_tool_cancel_notifications_total',
                                  { route: 'tools', result: 'sent' }, 1), 1);
  });

  test("a client that leaves fires the handler's AbortSignal", async () => {
    const { transport } = await connect();
    const sid = transport.sessionId;
    const owner = ownerOf(sid);
    const { aborted } = await leaveMidCall(`${sluice.url}/mcp`, owner, 'left-1', {
      'mcp-session-id': sid,
      'mcp-protocol-version': transport.protocolVersion ?? '2025-06-18',
    });
    assert.match(aborted.reason, /sluice client_disconnect/);
  });
});
