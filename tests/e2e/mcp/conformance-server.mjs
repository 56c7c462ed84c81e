// A session-ful Streamable HTTP MCP server on the official SDK that
// implements what the server scenarios of `@modelcontextprotocol/conformance`
// ask for: the test_* tools, resources, prompts, logging, completion, SSE
// resumption (an event store, and a tool that closes its own stream), and
// DNS rebinding protection (the SDK's createMcpExpressApp, which validates
// the Host header of a server bound to 127.0.0.1).
//
// startConformanceServer() listens on 127.0.0.1 port 0 and returns
// { url, answers, origins, close }; url is the MCP endpoint (…/mcp), origins
// the Host and Origin of each POST with an Origin that passed the Host check,
// answers one
// { tool, answered } per sampling/elicitation request its tools sent (the
// suite only checks that the request was made and the call returned content,
// not that the client's answer reached the server).

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CompleteRequestSchema,
  ElicitResultSchema,
  CreateMessageResultSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

// A 1x1 PNG and a minimal WAV, base64.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';

// json_schema_2020_12_tool is listed with this schema as it is (the SDK's
// conversion from zod would drop $schema, $defs and additionalProperties).
const SCHEMA_2020_12 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: {
    address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } },
  },
  properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
  additionalProperties: false,
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// How long a tool waits for the client's answer to its sampling or
// elicitation request (the SDK's default is 60 s); a client answers in
// milliseconds, and a lost answer then fails the call in bounded time.
const CLIENT_ANSWER_TIMEOUT_MS = 5_000;
const text = (t) => ({ content: [{ type: 'text', text: t }] });

// Events of the SSE streams, kept so a client can resume a stream
// (GET with Last-Event-ID). Event ids are `<stream>::<sequence>`.
function memoryEventStore() {
  const events = [];
  let seq = 0;
  return {
    async storeEvent(streamId, message) {
      seq += 1;
      const eventId = `${streamId}::${String(seq).padStart(8, '0')}`;
      events.push({ eventId, streamId, message });
      return eventId;
    },
    async getStreamIdForEventId(eventId) {
      return events.find((e) => e.eventId === eventId)?.streamId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const streamId = lastEventId.split('::')[0];
      for (const e of events) {
        if (e.streamId === streamId && e.eventId > lastEventId) await send(e.eventId, e.message);
      }
      return streamId;
    },
  };
}

// answers: one { tool, answered } per sampling/elicitation request a tool
// sent, answered false when the client's answer never arrived.
function buildServer(transports, answers) {
  const mcp = new McpServer({ name: 'sluice-conformance-server', version: '1.0.0' }, {
    capabilities: {
      tools: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      prompts: { listChanged: true },
      logging: {},
      completions: {},
    },
  });
  // A request to the client on the tool call's stream; records whether its
  // answer came back (a tool whose request times out fails the call).
  const askClient = async (tool, extra, request, schema) => {
    try {
      const result = await extra.sendRequest(request, schema, { timeout: CLIENT_ANSWER_TIMEOUT_MS });
      answers.push({ tool, answered: true });
      return result;
    } catch (e) {
      answers.push({ tool, answered: false });
      throw e;
    }
  };
  const log = (data) =>
    mcp.server.sendLoggingMessage({ level: 'info', logger: 'conformance-server', data }).catch(() => {});

  // --- tools ---
  mcp.registerTool('test_simple_text', { description: 'Returns simple text' },
                   async () => text('This is a simple text response for testing.'));
  mcp.registerTool('test_image_content', { description: 'Returns an image' },
                   async () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] }));
  mcp.registerTool('test_audio_content', { description: 'Returns audio' },
                   async () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }));
  mcp.registerTool('test_embedded_resource', { description: 'Returns an embedded resource' }, async () => ({
    content: [{
      type: 'resource',
      resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
    }],
  }));
  mcp.registerTool('test_multiple_content_types', { description: 'Returns text, an image and a resource' }, async () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      {
        type: 'resource',
        resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' },
      },
    ],
  }));
  mcp.registerTool('test_tool_with_logging', { description: 'Logs while it runs', inputSchema: {} },
                   async (_args, extra) => {
                     for (const data of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
                       await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
                       await sleep(20);
                     }
                     return text('Tool with logging executed successfully');
                   });
  mcp.registerTool('test_tool_with_progress', { description: 'Reports progress', inputSchema: {} },
                   async (_args, extra) => {
                     const progressToken = extra._meta?.progressToken ?? 0;
                     for (const progress of [0, 50, 100]) {
                       await extra.sendNotification({
                         method: 'notifications/progress',
                         params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
                       });
                       await sleep(20);
                     }
                     return text(String(progressToken));
                   });
  mcp.registerTool('test_error_handling', { description: 'Always fails' }, async () => {
    throw new Error('This tool intentionally returns an error for testing');
  });
  mcp.registerTool('test_reconnection', {
    description: 'Closes its SSE stream mid-call; the result comes on the resumed stream',
    inputSchema: {},
  }, async (_args, extra) => {
    const transport = transports.get(extra.sessionId);
    if (transport) transport.closeSSEStream(extra.requestId);
    await sleep(100);
    return text('Reconnection test completed successfully.');
  });
  mcp.registerTool('test_sampling', {
    description: 'Asks the client for an LLM completion',
    inputSchema: { prompt: z.string() },
  }, async ({ prompt }, extra) => {
    const result = await askClient('test_sampling', extra, {
      method: 'sampling/createMessage',
      params: { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 },
    }, CreateMessageResultSchema);
    return text(`LLM response: ${result.content?.text ?? 'No response'}`);
  });
  const elicit = (tool, message, requestedSchema) => async (_args, extra) => {
    const result = await askClient(tool, extra, {
      method: 'elicitation/create',
      params: { mode: 'form', message, requestedSchema },
    }, ElicitResultSchema);
    return text(`User response: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
  };
  mcp.registerTool('test_elicitation', {
    description: 'Asks the user for input',
    inputSchema: { message: z.string() },
  }, async (args, extra) => elicit('test_elicitation', args.message, {
    type: 'object',
    properties: { response: { type: 'string', description: "User's response" } },
    required: ['response'],
  })(args, extra));
  mcp.registerTool('test_elicitation_sep1034_defaults', {
    description: 'Elicitation with a default for every primitive type',
    inputSchema: {},
  }, elicit('test_elicitation_sep1034_defaults', 'Please review and update the form fields with defaults', {
    type: 'object',
    properties: {
      name: { type: 'string', description: 'User name', default: 'John Doe' },
      age: { type: 'integer', description: 'User age', default: 30 },
      score: { type: 'number', description: 'User score', default: 95.5 },
      status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
      verified: { type: 'boolean', description: 'Verification status', default: true },
    },
    required: [],
  }));
  mcp.registerTool('test_elicitation_sep1330_enums', {
    description: 'Elicitation with the five enum schema forms',
    inputSchema: {},
  }, elicit('test_elicitation_sep1330_enums', 'Please select options from the enum fields', {
    type: 'object',
    properties: {
      untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
      titledSingle: {
        type: 'string',
        description: 'Select one option with titles',
        oneOf: [
          { const: 'value1', title: 'First Option' },
          { const: 'value2', title: 'Second Option' },
          { const: 'value3', title: 'Third Option' },
        ],
      },
      legacyEnum: {
        type: 'string',
        description: 'Select one option (legacy)',
        enum: ['opt1', 'opt2', 'opt3'],
        enumNames: ['Option One', 'Option Two', 'Option Three'],
      },
      untitledMulti: {
        type: 'array',
        description: 'Select multiple options',
        minItems: 1,
        maxItems: 3,
        items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
      },
      titledMulti: {
        type: 'array',
        description: 'Select multiple options with titles',
        minItems: 1,
        maxItems: 3,
        items: {
          anyOf: [
            { const: 'value1', title: 'First Choice' },
            { const: 'value2', title: 'Second Choice' },
            { const: 'value3', title: 'Third Choice' },
          ],
        },
      },
    },
    required: [],
  }));
  mcp.registerTool('json_schema_2020_12_tool', {
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      name: z.string().optional(),
      address: z.object({ street: z.string().optional(), city: z.string().optional() }).optional(),
    },
  }, async (args) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`));
  // tools/list as the SDK answers it, with the 2020-12 tool's schema as written.
  const listTools = mcp.server._requestHandlers.get('tools/list');
  mcp.server._requestHandlers.set('tools/list', async (request, extra) => {
    const result = await listTools(request, extra);
    for (const tool of result.tools) {
      if (tool.name === 'json_schema_2020_12_tool') tool.inputSchema = SCHEMA_2020_12;
    }
    return result;
  });

  // --- resources ---
  mcp.registerResource('static-text', 'test://static-text', {
    title: 'Static Text Resource',
    description: 'A static text resource',
    mimeType: 'text/plain',
  }, async () => ({
    contents: [{ uri: 'test://static-text', mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
  }));
  mcp.registerResource('static-binary', 'test://static-binary', {
    title: 'Static Binary Resource',
    description: 'A static binary resource (an image)',
    mimeType: 'image/png',
  }, async () => ({ contents: [{ uri: 'test://static-binary', mimeType: 'image/png', blob: PNG }] }));
  mcp.registerResource('template', new ResourceTemplate('test://template/{id}/data', { list: undefined }), {
    title: 'Resource Template',
    description: 'A resource template with parameter substitution',
    mimeType: 'application/json',
  }, async (uri, { id }) => ({
    contents: [{
      uri: uri.toString(),
      mimeType: 'application/json',
      text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
    }],
  }));
  const subscriptions = new Set();
  mcp.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  mcp.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });

  // --- prompts ---
  mcp.registerPrompt('test_simple_prompt', { title: 'Simple Test Prompt', description: 'A prompt without arguments' },
                     async () => ({
                       messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }],
                     }));
  mcp.registerPrompt('test_prompt_with_arguments', {
    title: 'Prompt With Arguments',
    description: 'A prompt with required arguments',
    argsSchema: { arg1: z.string().describe('First test argument'), arg2: z.string().describe('Second test argument') },
  }, async ({ arg1, arg2 }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }],
  }));
  mcp.registerPrompt('test_prompt_with_embedded_resource', {
    title: 'Prompt With Embedded Resource',
    description: 'A prompt that embeds a resource',
    argsSchema: { resourceUri: z.string().describe('URI of the resource to embed') },
  }, async ({ resourceUri }) => ({
    messages: [
      {
        role: 'user',
        content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } },
      },
      { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
    ],
  }));
  mcp.registerPrompt('test_prompt_with_image', { title: 'Prompt With Image', description: 'A prompt with an image' },
                     async () => ({
                       messages: [
                         { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
                         { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
                       ],
                     }));

  // --- logging, completion ---
  mcp.server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    log(`Log level set to: ${request.params.level}`);
    return {};
  });
  mcp.server.setRequestHandler(CompleteRequestSchema, async () => ({
    completion: { values: [], total: 0, hasMore: false },
  }));
  return mcp;
}

export async function startConformanceServer() {
  const transports = new Map(); // session id -> transport
  const answers = [];
  const origins = []; // { host, origin } of each POST with an Origin that passed the Host check
  const app = createMcpExpressApp({ host: '127.0.0.1' });
  const noSession = (res) =>
    res.status(400).json({ jsonrpc: '2.0', error: { code: -32000, message: 'Invalid or missing session ID' }, id: null });

  app.post('/mcp', async (req, res) => {
    if (req.headers.origin) origins.push({ host: req.headers.host, origin: req.headers.origin });
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport) {
      if (sessionId || req.body?.method !== 'initialize') {
        noSession(res);
        return;
      }
      const mcp = buildServer(transports, answers);
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: memoryEventStore(),
        retryInterval: 200,
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) transports.delete(transport.sessionId);
        mcp.close().catch(() => {});
      };
      await mcp.connect(transport);
    }
    await transport.handleRequest(req, res, req.body);
  });
  const bySession = async (req, res) => {
    const transport = transports.get(req.headers['mcp-session-id']);
    if (!transport) {
      noSession(res);
      return;
    }
    await transport.handleRequest(req, res);
  };
  app.get('/mcp', bySession);
  app.delete('/mcp', bySession);

  const http = createServer(app);
  await new Promise((r) => http.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${http.address().port}/mcp`,
    answers,
    origins,
    async close() {
      for (const t of transports.values()) await t.close().catch(() => {});
      http.closeAllConnections?.();
      await new Promise((r) => http.close(r));
    },
  };
}
