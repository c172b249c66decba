#!/usr/bin/env node
'use strict';
// grpc-js interop client, a third-party client peer of the cocoonbox matrix.
//
//   node grpcjs_client.js --server_host=127.0.0.1 --server_port=N --test_case=large_unary
//       [--use_tls=true --ca_file=ca.pem --server_host_override=localhost]
//
// Runs one case (or every case with --test_case=all). Exit 0 on pass; on
// failure exit 1 with a one-line reason on stderr.

const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const { parseFlags, parseBool, loadTestingPackage } = require('./peer_common');

const MIB4 = 4 * 1024 * 1024;
const CASE_TIMEOUT_MS = 30000;
const SPECIAL_MESSAGE = '\t\ntest with whitespace\r\nand Unicode BMP \u263a and non-BMP \u{1f608}\t\n';
const ECHO_INITIAL = 'x-grpc-test-echo-initial';
const ECHO_TRAILING = 'x-grpc-test-echo-trailing-bin';
const INITIAL_VALUE = 'test_initial_metadata_value';
const TRAILING_VALUE = Buffer.from([0xab, 0xab, 0xab]);

class Failure extends Error {}

function check(cond, msg) {
  if (!cond) throw new Failure(msg);
}

function zeros(n) {
  return Buffer.alloc(n);
}

function payloadOf(size) {
  return { type: 'COMPRESSABLE', body: zeros(size) };
}

function bodyLen(msg) {
  return msg && msg.payload && msg.payload.body ? msg.payload.body.length : 0;
}

function checkBody(msg, size, what) {
  const n = bodyLen(msg);
  check(n === size, `${what}: payload body is ${n} bytes, want ${size}`);
  if (size > 0) check(msg.payload.body.equals(zeros(size)), `${what}: payload body is not all zeros`);
}

function codeName(code) {
  for (const [k, v] of Object.entries(grpc.status)) if (v === code) return k;
  return String(code);
}

function checkStatus(got, code, what, message) {
  check(got, `${what}: call succeeded, want ${codeName(code)}`);
  check(got.code === code, `${what}: status ${codeName(got.code)} (${JSON.stringify(got.details)}), want ${codeName(code)}`);
  if (message !== undefined) {
    check(got.details === message, `${what}: status message ${JSON.stringify(got.details)}, want ${JSON.stringify(message)}`);
  }
}

// Wraps a client/duplex/server-streaming call: next() resolves to the next
// message or null at end of stream; status resolves to the final status.
function track(call) {
  const queue = [];
  const waiters = [];
  let done = false;
  const t = {
    initial: null,
    status: new Promise((resolve) => call.on('status', resolve)),
    next() {
      if (queue.length) return Promise.resolve(queue.shift());
      if (done) return Promise.resolve(null);
      return new Promise((resolve) => waiters.push(resolve));
    },
    async rest() {
      const all = [];
      for (let m = await t.next(); m !== null; m = await t.next()) all.push(m);
      return all;
    },
  };
  const close = () => {
    done = true;
    while (waiters.length) waiters.shift()(null);
  };
  call.on('metadata', (md) => {
    t.initial = md;
  });
  call.on('data', (m) => {
    if (waiters.length) waiters.shift()(m);
    else queue.push(m);
  });
  call.on('end', close);
  call.on('error', close);
  return t;
}

// Unary call returning {err, resp, initial, status}.
function unary(method, req, metadata, options) {
  return new Promise((resolve) => {
    let initial = null;
    let result = null;
    const call = method(req, metadata || new grpc.Metadata(), options || {}, (err, resp) => {
      result = { err, resp };
    });
    call.on('metadata', (md) => {
      initial = md;
    });
    call.on('status', (status) => {
      // The callback always runs before 'status' in grpc-js; be safe anyway.
      setImmediate(() => resolve(Object.assign({ initial, status }, result)));
    });
  });
}

function echoMetadata() {
  const md = new grpc.Metadata();
  md.add(ECHO_INITIAL, INITIAL_VALUE);
  md.add(ECHO_TRAILING, TRAILING_VALUE);
  return md;
}

function checkEchoed(initial, trailers, what) {
  const iv = initial ? initial.get(ECHO_INITIAL) : [];
  check(iv.length === 1 && String(iv[0]) === INITIAL_VALUE, `${what}: initial metadata ${ECHO_INITIAL}=${JSON.stringify(iv.map(String))}, want ${INITIAL_VALUE}`);
  const tv = trailers ? trailers.get(ECHO_TRAILING) : [];
  check(tv.length === 1 && Buffer.isBuffer(tv[0]) && tv[0].equals(TRAILING_VALUE), `${what}: trailer ${ECHO_TRAILING}=${JSON.stringify(tv.map((v) => Buffer.from(v).toString('hex')))}, want ababab`);
}

function streamingRequest(size, payloadSize, extra) {
  const req = { response_parameters: [{ size }] };
  if (payloadSize !== undefined) req.payload = payloadOf(payloadSize);
  return Object.assign(req, extra || {});
}

// Size in bytes of a serialized SimpleRequest whose payload body is n bytes.
function simpleRequestSize(stub, n, responseSize) {
  const ser = stub.UnaryCall.requestSerialize;
  return ser({ response_size: responseSize, payload: payloadOf(n) }).length;
}

// Body size making the serialized SimpleRequest exactly `target` bytes.
function bodyForRequestSize(stub, target, responseSize) {
  let n = target - 64;
  n += target - simpleRequestSize(stub, n, responseSize);
  check(simpleRequestSize(stub, n, responseSize) === target, `cannot size a request to ${target} bytes`);
  return n;
}

function makeCases(stub, unimpl) {
  return {
    async empty_unary() {
      const r = await unary(stub.EmptyCall.bind(stub), {});
      check(!r.err, `EmptyCall failed: ${r.err && r.err.message}`);
      check(r.resp !== null && r.resp !== undefined, 'EmptyCall returned no message');
    },

    async large_unary() {
      const r = await unary(stub.UnaryCall.bind(stub), { response_type: 'COMPRESSABLE', response_size: 314159, payload: payloadOf(271828) });
      check(!r.err, `UnaryCall failed: ${r.err && r.err.message}`);
      checkBody(r.resp, 314159, 'UnaryCall response');
    },

    async client_streaming() {
      let result;
      const done = new Promise((resolve) => {
        const call = stub.StreamingInputCall((err, resp) => resolve({ err, resp }));
        for (const n of [27182, 8, 1828, 45904]) call.write({ payload: payloadOf(n) });
        call.end();
      });
      result = await done;
      check(!result.err, `StreamingInputCall failed: ${result.err && result.err.message}`);
      check(result.resp.aggregated_payload_size === 74922, `aggregated_payload_size ${result.resp.aggregated_payload_size}, want 74922`);
    },

    async server_streaming() {
      const sizes = [31415, 9, 2653, 58979];
      const call = stub.StreamingOutputCall({ response_type: 'COMPRESSABLE', response_parameters: sizes.map((size) => ({ size })) });
      const t = track(call);
      const msgs = await t.rest();
      const st = await t.status;
      checkStatus(st, grpc.status.OK, 'StreamingOutputCall');
      check(msgs.length === sizes.length, `got ${msgs.length} responses, want ${sizes.length}`);
      sizes.forEach((s, i) => checkBody(msgs[i], s, `response ${i}`));
    },

    async ping_pong() {
      const call = stub.FullDuplexCall();
      const t = track(call);
      const steps = [[31415, 27182], [9, 8], [2653, 1828], [58979, 45904]];
      for (const [i, [resp, req]] of steps.entries()) {
        call.write(streamingRequest(resp, req, { response_type: 'COMPRESSABLE' }));
        const m = await t.next();
        check(m !== null, `stream ended before response ${i}`);
        checkBody(m, resp, `response ${i}`);
      }
      call.end();
      check((await t.next()) === null, 'extra response after half-close');
      checkStatus(await t.status, grpc.status.OK, 'FullDuplexCall');
    },

    async empty_stream() {
      const call = stub.FullDuplexCall();
      const t = track(call);
      call.end();
      const msgs = await t.rest();
      check(msgs.length === 0, `got ${msgs.length} responses, want 0`);
      checkStatus(await t.status, grpc.status.OK, 'FullDuplexCall');
    },

    async cancel_after_begin() {
      const result = await new Promise((resolve) => {
        const call = stub.StreamingInputCall((err, resp) => resolve({ err, resp }));
        call.cancel();
      });
      checkStatus(result.err, grpc.status.CANCELLED, 'StreamingInputCall');
    },

    async cancel_after_first_response() {
      const call = stub.FullDuplexCall();
      const t = track(call);
      call.write(streamingRequest(31415, 27182));
      const m = await t.next();
      check(m !== null, 'stream ended before the first response');
      checkBody(m, 31415, 'first response');
      call.cancel();
      checkStatus(await t.status, grpc.status.CANCELLED, 'FullDuplexCall');
    },

    async timeout_on_sleeping_server() {
      const call = stub.FullDuplexCall({ deadline: Date.now() + 1 });
      const t = track(call);
      // The server would sleep 1 s before answering; the deadline is 1 ms.
      call.write({ payload: payloadOf(27182), response_parameters: [{ size: 31415, interval_us: 1000000 }] });
      const msgs = await t.rest();
      checkStatus(await t.status, grpc.status.DEADLINE_EXCEEDED, 'FullDuplexCall');
      check(msgs.length === 0, `got ${msgs.length} responses before the deadline`);
    },

    async status_code_and_message() {
      const message = 'test status message';
      const r = await unary(stub.UnaryCall.bind(stub), { response_status: { code: 2, message } });
      checkStatus(r.err, grpc.status.UNKNOWN, 'UnaryCall', message);
      const call = stub.FullDuplexCall();
      const t = track(call);
      call.write({ response_status: { code: 2, message } });
      call.end();
      await t.rest();
      checkStatus(await t.status, grpc.status.UNKNOWN, 'FullDuplexCall', message);
    },

    async special_status_message() {
      const r = await unary(stub.UnaryCall.bind(stub), { response_status: { code: 2, message: SPECIAL_MESSAGE } });
      checkStatus(r.err, grpc.status.UNKNOWN, 'UnaryCall', SPECIAL_MESSAGE);
    },

    async custom_metadata() {
      const r = await unary(stub.UnaryCall.bind(stub), { response_size: 314159, payload: payloadOf(271828) }, echoMetadata());
      check(!r.err, `UnaryCall failed: ${r.err && r.err.message}`);
      checkBody(r.resp, 314159, 'UnaryCall response');
      checkEchoed(r.initial, r.status.metadata, 'UnaryCall');

      const call = stub.FullDuplexCall(echoMetadata());
      const t = track(call);
      call.write(streamingRequest(314159, 271828));
      call.end();
      const msgs = await t.rest();
      const st = await t.status;
      checkStatus(st, grpc.status.OK, 'FullDuplexCall');
      check(msgs.length === 1, `FullDuplexCall: got ${msgs.length} responses, want 1`);
      checkBody(msgs[0], 314159, 'FullDuplexCall response');
      checkEchoed(t.initial, st.metadata, 'FullDuplexCall');
    },

    async unimplemented_method() {
      const r = await unary(stub.UnimplementedCall.bind(stub), {});
      checkStatus(r.err, grpc.status.UNIMPLEMENTED, 'TestService/UnimplementedCall');
    },

    async unimplemented_service() {
      const r = await unary(unimpl.UnimplementedCall.bind(unimpl), {});
      checkStatus(r.err, grpc.status.UNIMPLEMENTED, 'UnimplementedService/UnimplementedCall');
    },

    async max_message_under() {
      const target = MIB4 - 64;
      const respSize = target - 10; // SimpleResponse{payload{body}} adds 10 bytes here
      const n = bodyForRequestSize(stub, target, respSize);
      const r = await unary(stub.UnaryCall.bind(stub), { response_size: respSize, payload: payloadOf(n) });
      check(!r.err, `UnaryCall of a ${target}-byte request failed: ${r.err && r.err.message}`);
      checkBody(r.resp, respSize, 'UnaryCall response');
    },

    async max_message_over() {
      const target = MIB4 + 64;
      const n = bodyForRequestSize(stub, target, 0);
      const r = await unary(stub.UnaryCall.bind(stub), { payload: payloadOf(n) });
      checkStatus(r.err, grpc.status.RESOURCE_EXHAUSTED, `UnaryCall of a ${target}-byte request`);
    },
  };
}

async function main() {
  let flags;
  try {
    flags = parseFlags(process.argv.slice(2), {
      server_host: '127.0.0.1',
      server_port: '',
      test_case: 'large_unary',
      use_tls: 'false',
      ca_file: '',
      server_host_override: '',
      use_test_ca: 'false',
    });
    flags.use_tls = parseBool('use_tls', flags.use_tls);
    if (!/^\d+$/.test(flags.server_port)) throw new Error('--server_port is required');
    if (flags.use_tls && !flags.ca_file) throw new Error('--use_tls=true needs --ca_file');
  } catch (e) {
    process.stderr.write(`grpcjs_client: ${e.message}\n`);
    process.exit(2);
  }

  const testing = loadTestingPackage(grpc);
  const options = {
    'grpc.max_send_message_length': -1,
    'grpc.max_receive_message_length': -1,
  };
  let creds;
  if (flags.use_tls) {
    creds = grpc.credentials.createSsl(fs.readFileSync(flags.ca_file));
    if (flags.server_host_override) {
      options['grpc.ssl_target_name_override'] = flags.server_host_override;
      options['grpc.default_authority'] = flags.server_host_override;
    }
  } else {
    creds = grpc.credentials.createInsecure();
  }
  const host = flags.server_host.includes(':') ? `[${flags.server_host}]` : flags.server_host;
  const target = `${host}:${flags.server_port}`;
  const stub = new testing.TestService(target, creds, options);
  const unimpl = new testing.UnimplementedService(target, creds, options);
  const cases = makeCases(stub, unimpl);

  const names = flags.test_case === 'all' ? Object.keys(cases) : [flags.test_case];
  for (const name of names) {
    if (!cases[name]) {
      process.stderr.write(`grpcjs_client: unknown test case ${name}\n`);
      process.exit(2);
    }
  }
  let failed = 0;
  for (const name of names) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Failure(`timed out after ${CASE_TIMEOUT_MS} ms`)), CASE_TIMEOUT_MS);
    });
    try {
      await Promise.race([cases[name](), timeout]);
      if (names.length > 1) process.stdout.write(`PASS ${name}\n`);
    } catch (e) {
      failed++;
      const reason = (e instanceof Failure ? e.message : `${e.name}: ${e.message}`).replace(/\s+/g, ' ');
      process.stderr.write(`${name}: FAIL: ${reason}\n`);
    } finally {
      clearTimeout(timer);
    }
  }
  stub.close();
  unimpl.close();
  process.exit(failed ? 1 : 0);
}

main();
