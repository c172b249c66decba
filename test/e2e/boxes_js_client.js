#!/usr/bin/env node
'use strict';
// A grpc-js client of cocoonbox.control.v1.Boxes, for end-to-end tests: the contract is plain
// gRPC, loaded from proto/ at run time with @grpc/proto-loader (no generated code of ours).
// grpc-js and proto-loader come from test/interop/node_modules (npm ci there).
//
//   COCOONBOX_TOKEN=... node boxes_js_client.js --port N list
//   COCOONBOX_TOKEN=... node boxes_js_client.js --port N ensure [--name NAME] [--wait]
//
// The token comes from the COCOONBOX_TOKEN environment variable, never argv. Prints one JSON
// value on stdout; on a gRPC error exits 1 with "CODE: message" on stderr (the code as grpc-js
// names it), like boxes_client.py.

const path = require('path');
const { createRequire } = require('module');

const interopRequire = createRequire(path.resolve(__dirname, '..', 'interop', 'package.json'));
const grpc = interopRequire('@grpc/grpc-js');
const protoLoader = interopRequire('@grpc/proto-loader');

const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');
const TIMEOUT_MS = 60000;

function usage(msg) {
  process.stderr.write(`boxes_js_client: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const out = { port: 0, command: '', name: '', wait: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--port') out.port = Number(argv[++i]);
    else if (a === '--name') out.name = argv[++i];
    else if (a === '--wait') out.wait = true;
    else if (a.startsWith('--')) usage(`unknown flag ${a}`);
    else if (!out.command) out.command = a;
    else usage(`unexpected argument ${a}`);
  }
  if (!(out.port > 0)) usage('--port N is required');
  if (!out.command) usage('a command (list, ensure) is required');
  return out;
}

function codeName(code) {
  for (const [k, v] of Object.entries(grpc.status)) if (v === code) return k;
  return String(code);
}

function boxJson(b) {
  return {
    id: b.id,
    name: b.name,
    state: b.state,
    detail: b.detail,
    isolated: b.isolated,
    attached: b.attached_clients,
  };
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const def = protoLoader.loadSync('cocoonbox/control/v1/boxes.proto', {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    enums: String,
    longs: String,
    defaults: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  const Boxes = pkg.cocoonbox.control.v1.Boxes;
  const client = new Boxes(`127.0.0.1:${args.port}`, grpc.credentials.createInsecure());

  const md = new grpc.Metadata();
  const token = process.env.COCOONBOX_TOKEN || '';
  if (token) md.set('authorization', `Bearer ${token}`);
  const opts = { deadline: Date.now() + TIMEOUT_MS };

  const done = (err, value) => {
    client.close();
    if (err) {
      process.stderr.write(`${codeName(err.code)}: ${err.details}\n`);
      process.exit(1);
    }
    process.stdout.write(JSON.stringify(value) + '\n');
  };

  if (args.command === 'list') {
    client.List({}, md, opts, (err, resp) => done(err, err ? null : resp.boxes.map(boxJson)));
  } else if (args.command === 'ensure') {
    client.Ensure({ name: args.name, wait: args.wait }, md, opts, (err, box) =>
      done(err, err ? null : boxJson(box)));
  } else {
    usage(`unknown command ${args.command}`);
  }
}

main();
