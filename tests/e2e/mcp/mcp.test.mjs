// The official MCP TypeScript SDK through sluice: its Client over Streamable
// HTTP, to a stateless Streamable HTTP McpServer behind a `protocol: mcp`
// route. What a reviewer checks by hand: tools/list and tools/call pass
// through; a destructive tool answered 503 is called exactly once while a
// read-only one is retried; a tool budget overrun reaches the agent as an
// McpError -32001 carrying sluice's message.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

import { metric, sleep, startSluice, stopAll } from '../openai-sdk/harness.mjs';

// --- a stateless Streamable HTTP MCP server -------------------------------------
// A fresh McpServer and transport per request (the SDK's stateless pattern).
// In front of it, a test hook: tools/call is counted per tool, and a tool
// armed with failNext() gets one plain HTTP 503 instead of an answer.

const calls = new Map();
const failNext = new Set();

function buildServer() {
  const server = new McpServer({ name: 'e2e-tools', version: '1.0.0' });
  const text = (t) => ({ content: [{ type: 'text', text: t }] });
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
  }, async () => { await sleep(3_000); return text('late'); });
  return server;
}

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

async function startMcpServer() {
  const http = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const raw = await readBody(req);
    const body = JSON.parse(raw);
    if (body.method === 'tools/call') {
      const name = body.params?.name;
      calls.set(name, (calls.get(name) ?? 0) + 1);
      if (failNext.delete(name)) {
        res.writeHead(503, { 'content-type': 'text/plain' }).end('busy');
        return;
      }
    }
    const server = buildServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => { transport.close(); server.close(); });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise((r) => http.listen(0, '127.0.0.1', r));
  return { http, url: `http://127.0.0.1:${http.address().port}` };
}

// --- the tests ------------------------------------------------------------------

describe('MCP SDK client and server through sluice', () => {
  let upstream;
  let sluice;
  let client;

  before(async () => {
    upstream = await startMcpServer();
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
    assert.deepEqual(Object.keys(byName).sort(), ['drop_table', 'echo', 'read_docs', 'slow_report']);
    assert.equal(byName.read_docs.annotations.readOnlyHint, true);
    assert.equal(byName.drop_table.annotations.destructiveHint, true);
  });

  test('tools/call passes through', async () => {
    const result = await client.callTool({ name: 'echo', arguments: { message: 'hi' } });
    assert.deepEqual(result.content, [{ type: 'text', text: 'echo: hi' }]);
    assert.equal(await metric(sluice.adminUrl, 'sluice_tool_calls_total',
                              { route: 'tools', tool: 'other', outcome: 'ok' }), 1);
  });

  test('a destructive tool answered 503 is called exactly once', async () => {
    failNext.add('drop_table');
    // The server's own 503 reaches the client (the SDK's transport error carries its body).
    await assert.rejects(client.callTool({ name: 'drop_table', arguments: { table: 'users' } }),
                         (e) => e.code === 503 && /busy/.test(e.message));
    assert.equal(calls.get('drop_table'), 1);
  });

  test('a read-only tool answered 503 is retried', async () => {
    failNext.add('read_docs');
    const result = await client.callTool({ name: 'read_docs', arguments: { topic: 'sluice' } });
    assert.deepEqual(result.content, [{ type: 'text', text: 'docs about sluice' }]);
    assert.equal(calls.get('read_docs'), 2);
  });

  test('a tool budget overrun is McpError -32001 with sluice\'s message', async () => {
    const err = await client.callTool({ name: 'slow_report', arguments: {} }).then(
      () => assert.fail('slow_report should not succeed'), (e) => e);
    assert.ok(err instanceof McpError, `not an McpError: ${err}`);
    assert.equal(err.code, -32001);
    assert.match(err.message, /sluice budget-exhausted: /);
    assert.equal(err.data?.cancel_reason, 'budget_exhausted');
    assert.equal(await metric(sluice.adminUrl, 'sluice_tool_calls_total',
                              { route: 'tools', tool: 'slow_report', outcome: 'budget_exhausted' }),
                 1);
  });
});
