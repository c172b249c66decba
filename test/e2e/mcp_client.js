#!/usr/bin/env node
'use strict';
// An MCP client for end-to-end tests: the MCP TypeScript SDK's own Client (pinned in
// test/interop/package.json, installed there by npm ci), over Streamable HTTP or stdio, runs
// the steps of a JSON file and prints one JSON array with a result per step.
//
//   COCOONBOX_TOKEN=... node mcp_client.js --http URL STEPS.json
//   node mcp_client.js --stdio STEPS.json -- COMMAND ARGS...
//
// Over HTTP the token goes in `Authorization: Bearer` from COCOONBOX_TOKEN (never argv).
// Over stdio the SDK starts COMMAND with this process's environment.
//
// Steps:
//   {"op": "info"}                               -> {"server": serverInfo, "version": negotiated}
//   {"op": "list"}                               -> {"tools": [names]}
//   {"op": "list_full"}                          -> {"tools": [Tool objects]}
//   {"op": "call", "name": N, "arguments": {..}} -> {"result": CallToolResult, "progress": [messages]}
//   {"op": "call_until", "name": N, "arguments": {..}, "tries": T, "ms": M}
//                                                -> the first result without isError (or the
//                                                   last), retried every M ms, and "attempts"
//   {"op": "sleep", "ms": M}                     -> {}
//   {"op": "list_changed"}                       -> {"count": notifications/tools/list_changed seen}
//   {"op": "wait_list_changed", "ms": M}         -> {"count": ...} once one arrived, or after M ms
// A step that throws gives {"error": {"code": C, "message": M}} and the run goes on.

const path = require('path');
const fs = require('fs');
const { createRequire } = require('module');

const sdk = createRequire(path.resolve(__dirname, '..', 'interop', 'package.json'));
const { Client } = sdk('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = sdk('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { StdioClientTransport } = sdk('@modelcontextprotocol/sdk/client/stdio.js');
const { ToolListChangedNotificationSchema } = sdk('@modelcontextprotocol/sdk/types.js');

async function main() {
  const args = process.argv.slice(2);
  let transport;
  let stepsFile;
  if (args[0] === '--http') {
    const headers = {};
    if (process.env.COCOONBOX_TOKEN) headers.Authorization = `Bearer ${process.env.COCOONBOX_TOKEN}`;
    transport = new StreamableHTTPClientTransport(new URL(args[1]), { requestInit: { headers } });
    stepsFile = args[2];
  } else if (args[0] === '--stdio') {
    stepsFile = args[1];
    const dash = args.indexOf('--');
    const command = args.slice(dash + 1);
    transport = new StdioClientTransport({
      command: command[0],
      args: command.slice(1),
      env: process.env,
      stderr: 'inherit',
    });
  } else {
    throw new Error('usage: mcp_client.js --http URL STEPS.json | --stdio STEPS.json -- CMD...');
  }
  const steps = JSON.parse(fs.readFileSync(stepsFile, 'utf8'));
  const client = new Client({ name: 'cocoonbox-e2e', version: '1.0.0' });
  let listChanged = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => { listChanged++; });
  await client.connect(transport);
  const out = [];
  for (const step of steps) {
    try {
      if (step.op === 'info') {
        out.push({ server: client.getServerVersion(), version: transport.protocolVersion ?? null });
      } else if (step.op === 'list' || step.op === 'list_full') {
        const r = await client.listTools();
        out.push({ tools: step.op === 'list' ? r.tools.map((t) => t.name) : r.tools });
      } else if (step.op === 'call') {
        const progress = [];
        const result = await client.callTool(
          { name: step.name, arguments: step.arguments ?? {} }, undefined,
          { onprogress: (p) => progress.push(p.message ?? String(p.progress)), timeout: 120000 });
        out.push({ result, progress });
      } else if (step.op === 'call_until') {
        let result;
        let attempts = 0;
        while (attempts < (step.tries ?? 30)) {
          attempts++;
          result = await client.callTool({ name: step.name, arguments: step.arguments ?? {} });
          if (!result.isError) break;
          await new Promise((r) => setTimeout(r, step.ms ?? 500));
        }
        out.push({ result, attempts });
      } else if (step.op === 'sleep') {
        await new Promise((r) => setTimeout(r, step.ms));
        out.push({});
      } else if (step.op === 'wait_list_changed') {
        const until = Date.now() + (step.ms ?? 20000);
        while (listChanged === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
        out.push({ count: listChanged });
      } else if (step.op === 'list_changed') {
        out.push({ count: listChanged });
      } else {
        throw new Error(`unknown op ${step.op}`);
      }
    } catch (e) {
      out.push({ error: { code: e.code ?? null, message: String(e.message ?? e) } });
    }
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  await client.close();
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write(`mcp_client: ${e.stack ?? e}\n`);
  process.exit(1);
});
