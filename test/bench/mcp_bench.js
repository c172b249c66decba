#!/usr/bin/env node
'use strict';
// Driver of `scripts/bench mcp` (see there): the MCP TypeScript SDK's Client, as a coding
// agent uses it, timing box tool calls through `cocoonbox mcp` (stdio) and straight to the
// box MCP on the api (Streamable HTTP), and initialize + tools/list through the bridge.
//
//   COCOONBOX_TOKEN=... node mcp_bench.js calls URL CALLS -- COCOONBOX_BIN
//   node mcp_bench.js startup RUNS -- COCOONBOX_BIN
//
// Prints one JSON object of millisecond samples on stdout.

const path = require('path');
const { createRequire } = require('module');

const sdk = createRequire(path.resolve(__dirname, '..', 'interop', 'package.json'));
const { Client } = sdk('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = sdk('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { StdioClientTransport } = sdk('@modelcontextprotocol/sdk/client/stdio.js');

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const call = { name: 'list_dir', arguments: { path: '/workspace/empty' } };

async function connected(transport) {
  const client = new Client({ name: 'cocoonbox-bench', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

async function main() {
  const [mode, ...rest] = process.argv.slice(2);
  const bin = rest[rest.indexOf('--') + 1];
  if (mode === 'calls') {
    const [url, n] = [rest[0], Number(rest[1])];
    const direct = await connected(new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${process.env.COCOONBOX_TOKEN}` } } }));
    const bridge = await connected(new StdioClientTransport({ command: bin, args: ['mcp'], env: process.env, stderr: 'inherit' }));
    for (const c of [direct, bridge]) {
      for (let i = 0; i < 20; i++) {
        const r = await c.callTool(call);
        if (r.isError) throw new Error(`warm-up call failed: ${JSON.stringify(r)}`);
      }
    }
    const out = { direct: [], bridge: [] };
    // Alternating blocks of 10, so both paths see the same machine load.
    for (let done = 0; done < n; done += 10) {
      for (const [name, c] of [['direct', direct], ['bridge', bridge]]) {
        for (let i = 0; i < 10; i++) {
          const t0 = process.hrtime.bigint();
          const r = await c.callTool(call);
          out[name].push(ms(t0));
          if (r.isError) throw new Error(`call failed: ${JSON.stringify(r)}`);
        }
      }
    }
    await direct.close();
    await bridge.close();
    process.stdout.write(JSON.stringify(out) + '\n');
  } else if (mode === 'startup') {
    const out = { startup: [] };
    for (let i = 0; i < Number(rest[0]); i++) {
      const t0 = process.hrtime.bigint();
      const c = await connected(new StdioClientTransport({ command: bin, args: ['mcp'], env: process.env, stderr: 'inherit' }));
      const tools = await c.listTools();
      out.startup.push(ms(t0));
      if (tools.tools.length !== 13) throw new Error(`tools/list gave ${tools.tools.length} tools`);
      await c.close();
    }
    process.stdout.write(JSON.stringify(out) + '\n');
  } else {
    throw new Error('usage: mcp_bench.js calls URL N -- BIN | startup N -- BIN');
  }
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write(`mcp_bench: ${e.stack ?? e}\n`);
  process.exit(1);
});
