// The MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned in package.json) as the client of
// cocoonbox's MCP server library, through test/interop/mcp_test_server.
//
//   node mcp_sdk_client.mjs stdio /path/to/mcp_test_server
//   node mcp_sdk_client.mjs http http://127.0.0.1:PORT/mcp
//
// Checks, each printed as "ok <name>" (the first failure exits 1 with its reason):
//   initialize and the negotiated version; listTools across pages; callTool results (text,
//   structured with outputSchema, image, isError); progress callbacks; cancellation through an
//   AbortSignal reaching the server's handler; unknown tool -> -32602; list_changed.
//   HTTP only, with fetch: session id shape, 406, 400 (bad version, no session), 202, 404
//   after DELETE. stdio only: raw version negotiation over the pipe.

import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ErrorCode,
  McpError,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const [mode, target] = process.argv.slice(2);
if (!['stdio', 'http'].includes(mode) || !target) {
  console.error('usage: node mcp_sdk_client.mjs stdio SERVER_BINARY | http URL');
  process.exit(2);
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}
function ok(name) {
  console.log(`ok ${name}`);
}
// A guard against hangs only: generous, never part of what is checked.
function within(promise, what, ms = 30000) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, guard]).finally(() => clearTimeout(timer));
}

// Records the messages a transport carries, to read the negotiated version.
class Recording {
  constructor(inner) {
    this.inner = inner;
    this.received = [];
  }
  start() { return this.inner.start(); }
  send(m, o) { return this.inner.send(m, o); }
  close() { return this.inner.close(); }
  get sessionId() { return this.inner.sessionId; }
  setProtocolVersion(v) { this.inner.setProtocolVersion?.(v); }
  get onmessage() { return this.inner.onmessage; }
  set onmessage(f) {
    this.inner.onmessage = (m, extra) => {
      this.received.push(m);
      f?.(m, extra);
    };
  }
  get onclose() { return this.inner.onclose; }
  set onclose(f) { this.inner.onclose = f; }
  get onerror() { return this.inner.onerror; }
  set onerror(f) { this.inner.onerror = f; }
}

async function sdkChecks(client, transport) {
  const info = client.getServerVersion();
  check(info?.name === 'cocoonbox-mcp-test-server', `serverInfo.name is ${info?.name}`);
  check(client.getServerCapabilities()?.tools?.listChanged === true, 'tools.listChanged');
  check(client.getInstructions() === 'A test server for interop checks.', 'instructions');
  const init = transport.received.find((m) => m.id !== undefined && m.result?.protocolVersion);
  check(init?.result.protocolVersion === '2025-11-25',
        `negotiated ${init?.result.protocolVersion}, want 2025-11-25`);
  ok('initialize');

  // Pages of 2: follow nextCursor to the end.
  const names = [];
  let cursor;
  let pages = 0;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    check(page.tools.length <= 2, `page of ${page.tools.length} tools`);
    names.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
    pages++;
  } while (cursor && pages < 20);
  const want = ['echo', 'add', 'image', 'fail', 'slow', 'stats', 'toggle'];
  check(JSON.stringify(names) === JSON.stringify(want), `tools ${names}`);
  check(pages === 4, `${pages} pages`);
  ok('tools/list pagination');

  const echo = await client.callTool({ name: 'echo', arguments: { text: 'hi from the SDK' } });
  check(echo.content[0].type === 'text' && echo.content[0].text === 'hi from the SDK', 'echo');
  check(!echo.isError, 'echo is not an error');
  const add = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } });
  check(add.structuredContent?.sum === 42, `add: ${JSON.stringify(add)}`);
  check(JSON.parse(add.content[0].text).sum === 42, 'structured output mirrored as text');
  const image = await client.callTool({ name: 'image', arguments: {} });
  check(image.content[0].type === 'image' && image.content[0].mimeType === 'image/png', 'image');
  check(Buffer.from(image.content[0].data, 'base64').subarray(1, 4).toString() === 'PNG', 'png bytes');
  const failed = await client.callTool({ name: 'fail', arguments: {} });
  check(failed.isError === true && /always fails/.test(failed.content[0].text), 'isError');
  const badArgs = await client.callTool({ name: 'echo', arguments: { text: 5 } });
  check(badArgs.isError === true, 'bad arguments are a tool execution error');
  ok('tools/call results');

  try {
    await client.callTool({ name: 'no_such_tool', arguments: {} });
    check(false, 'unknown tool accepted');
  } catch (e) {
    check(e instanceof McpError && e.code === ErrorCode.InvalidParams, `unknown tool: ${e}`);
  }
  ok('unknown tool is -32602');

  // Progress, then cancellation through an AbortSignal once all progress arrived.
  const progress = [];
  const controller = new AbortController();
  const call = client.callTool({ name: 'slow', arguments: { steps: 3 } }, undefined, {
    signal: controller.signal,
    onprogress: (p) => {
      progress.push(p);
      if (p.progress === 3) controller.abort('enough');
    },
  });
  try {
    await within(call, 'slow call');
    check(false, 'the cancelled call resolved');
  } catch (e) {
    check(!(e instanceof McpError) || e.code !== ErrorCode.InvalidParams, `cancel: ${e}`);
  }
  check(progress.map((p) => p.progress).join(',') === '1,2,3', `progress ${JSON.stringify(progress)}`);
  check(progress[0].total === 3 && progress[0].message === 'step 1', 'progress total and message');
  ok('progress notifications');
  // The server's handler saw the cancellation.
  let cancelled = 0;
  for (let i = 0; i < 200 && cancelled < 1; i++) {
    const stats = await client.callTool({ name: 'stats', arguments: {} });
    cancelled = stats.structuredContent.slow_cancelled;
    if (cancelled < 1) await new Promise((r) => setTimeout(r, 50));
  }
  check(cancelled === 1, `slow_cancelled is ${cancelled}`);
  ok('cancellation reaches the server');

  // list_changed: toggle adds a tool and notifies.
  const changed = new Promise((resolve) => {
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve());
  });
  const toggled = await client.callTool({ name: 'toggle', arguments: {} });
  check(toggled.content[0].text === 'added', 'toggle');
  await within(changed, 'list_changed');
  const after = [];
  cursor = undefined;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    after.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor);
  check(after.includes('extra'), `tools after toggle: ${after}`);
  const extra = await client.callTool({ name: 'extra', arguments: {} });
  check(extra.content[0].text === 'extra', 'extra');
  ok('list_changed');
}

async function rawHttpChecks(url, sessionId) {
  check(/^[\x21-\x7e]{16,}$/.test(sessionId ?? ''), `session id ${sessionId}`);
  const base = { 'content-type': 'application/json', 'mcp-session-id': sessionId };
  const ping = JSON.stringify({ jsonrpc: '2.0', id: 900, method: 'ping' });
  let r = await fetch(url, { method: 'POST', headers: { ...base, accept: 'application/json' }, body: ping });
  check(r.status === 406, `406 without text/event-stream: ${r.status}`);
  await r.body?.cancel();
  const accept = 'application/json, text/event-stream';
  r = await fetch(url, {
    method: 'POST',
    headers: { ...base, accept, 'mcp-protocol-version': '1999-01-01' },
    body: ping,
  });
  check(r.status === 400, `400 for a bad protocol version: ${r.status}`);
  await r.body?.cancel();
  r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept },
    body: ping,
  });
  check(r.status === 400, `400 without a session id: ${r.status}`);
  await r.body?.cancel();
  r = await fetch(url, {
    method: 'POST',
    headers: { ...base, accept, 'mcp-protocol-version': '2025-11-25' },
    body: ping,
  });
  check(r.status === 200, `ping: ${r.status}`);
  check((await r.json()).id === 900, 'ping reply');
  r = await fetch(url, {
    method: 'POST',
    headers: { ...base, accept },
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1 } }),
  });
  check(r.status === 202, `202 for a notification: ${r.status}`);
  await r.body?.cancel();
  ok('http status codes');
}

async function main() {
  if (mode === 'stdio') {
    await rawStdioNegotiation(target);
    const inner = new StdioClientTransport({ command: target, args: ['--stdio'], stderr: 'inherit' });
    const transport = new Recording(inner);
    const client = new Client({ name: 'sdk-interop', version: '1.0.0' });
    await within(client.connect(transport), 'connect');
    await sdkChecks(client, transport);
    await client.close();
    ok('stdio close');
    return;
  }
  const inner = new StreamableHTTPClientTransport(new URL(target));
  const transport = new Recording(inner);
  const client = new Client({ name: 'sdk-interop', version: '1.0.0' });
  await within(client.connect(transport), 'connect');
  check(inner.protocolVersion === '2025-11-25', `transport version ${inner.protocolVersion}`);
  await sdkChecks(client, transport);
  const sessionId = inner.sessionId;
  await rawHttpChecks(target, sessionId);
  await inner.terminateSession();
  const r = await fetch(target, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': sessionId,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 901, method: 'ping' }),
  });
  check(r.status === 404, `404 after DELETE: ${r.status}`);
  await r.body?.cancel();
  ok('404 after DELETE');
  await client.close();
}

// Version negotiation without the SDK: the SDK always asks for its newest revision.
async function rawStdioNegotiation(binary) {
  for (const [asked, want] of [['2025-03-26', '2025-03-26'], ['2025-06-18', '2025-06-18'], ['2024-11-05', '2025-11-25']]) {
    const child = spawn(binary, ['--stdio'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = createInterface({ input: child.stdout });
    const first = new Promise((resolve) => lines.once('line', resolve));
    child.stdin.write(JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: asked, capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    }) + '\n');
    const reply = JSON.parse(await within(first, 'raw initialize'));
    child.stdin.end();
    await new Promise((resolve) => child.once('exit', resolve));
    check(reply.result?.protocolVersion === want, `asked ${asked}, got ${reply.result?.protocolVersion}`);
  }
  ok('version negotiation');
}

main().then(
  () => {
    console.log('all checks passed');
    process.exit(0);
  },
  (e) => {
    console.error(`FAIL: ${e?.stack ?? e}`);
    process.exit(1);
  },
);
