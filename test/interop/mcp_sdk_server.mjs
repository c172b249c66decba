// The MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned in package.json) as the server our
// MCP client (test/interop/mcp_interop_client) is checked against: McpServer behind one
// StreamableHTTPServerTransport per session, on node's HTTP/1.1 server or on an h2c
// (HTTP/2 prior knowledge) server.
//
//   node mcp_sdk_server.mjs --port=0 [--h2c]      prints "listening on port N"; endpoint /mcp
//
// Tools: echo {text}; progress {steps} (progress 1..steps, then "done"); slow (runs until the
// client cancels it); stats ({"cancelled": n}); fail (isError); toggle (adds or removes the
// tool "extra", which makes McpServer send notifications/tools/list_changed).

import http from 'node:http';
import http2 from 'node:http2';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod';

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const [k, v] = a.replace(/^--/, '').split('=');
    return [k, v ?? 'true'];
  }),
);
const port = Number(args.port ?? 0);
let cancelled = 0;

function makeServer() {
  const server = new McpServer(
    { name: 'sdk-test-server', version: '1.0.0' },
    { capabilities: { tools: { listChanged: true } }, instructions: 'SDK side of the interop test' },
  );
  server.registerTool('echo', { description: 'Echoes', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text }] }));
  server.registerTool('progress', { description: 'Reports progress', inputSchema: { steps: z.number().int() } },
    async ({ steps }, extra) => {
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= steps; i++) {
        if (token !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress: i, total: steps, message: `step ${i}` },
          });
        }
      }
      return { content: [{ type: 'text', text: 'done' }] };
    });
  // Without an inputSchema the SDK passes only |extra| to the callback.
  server.registerTool('slow', { description: 'Runs until cancelled' }, async (extra) =>
    new Promise((resolve) => {
      extra.signal.addEventListener('abort', () => {
        cancelled++;
        resolve({ content: [{ type: 'text', text: 'cancelled' }] });
      });
    }));
  server.registerTool('stats', { description: 'Counters' },
    async () => ({ content: [{ type: 'text', text: JSON.stringify({ cancelled }) }] }));
  server.registerTool('fail', { description: 'Fails' },
    async () => ({ isError: true, content: [{ type: 'text', text: 'the SDK tool failed' }] }));
  let extraTool = null;
  server.registerTool('toggle', { description: 'Adds or removes extra' }, async () => {
    if (extraTool) {
      extraTool.remove();
      extraTool = null;
      return { content: [{ type: 'text', text: 'removed' }] };
    }
    extraTool = server.registerTool('extra', { description: 'Toggled on' },
      async () => ({ content: [{ type: 'text', text: 'extra' }] }));
    return { content: [{ type: 'text', text: 'added' }] };
  });
  return server;
}

const transports = new Map();

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname !== '/mcp') {
    res.writeHead(404).end();
    return;
  }
  let body;
  if (req.method === 'POST') {
    const text = await readBody(req);
    try {
      body = JSON.parse(text);
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end(
        JSON.stringify({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null }));
      return;
    }
  }
  const sid = req.headers['mcp-session-id'];
  let transport = sid ? transports.get(sid) : undefined;
  if (!transport) {
    if (sid || req.method !== 'POST' || !isInitializeRequest(body)) {
      res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' }).end(
        JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'no such session' }, id: null }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    transport.onclose = () => {
      if (transport.sessionId) transports.delete(transport.sessionId);
    };
    await makeServer().connect(transport);
  }
  await transport.handleRequest(req, res, body);
}

function onRequest(req, res) {
  handle(req, res).catch((e) => {
    console.error(`mcp_sdk_server: ${e?.stack ?? e}`);
    if (!res.headersSent) res.writeHead(500).end();
  });
}

const server = args.h2c === 'true' ? http2.createServer({}, onRequest) : http.createServer(onRequest);
server.listen(port, '127.0.0.1', () => {
  console.log(`listening on port ${server.address().port}`);
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    for (const t of transports.values()) t.close().catch(() => {});
    server.close();
    process.exit(0);
  });
}
