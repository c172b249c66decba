#!/usr/bin/env node
'use strict';
// grpc-js implementation of grpc.testing.TestService, the third-party server
// peer of the cocoonbox interop matrix.
//
//   node grpcjs_server.js --port=0 [--use_tls=true --tls_cert_file=F --tls_key_file=F]
//
// Prints exactly one line `listening on port N` once bound (port 0 picks one).
// Listens on 127.0.0.1 unless --host says otherwise.

const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const { parseFlags, parseBool, loadTestingPackage } = require('./peer_common');

const ECHO_INITIAL = 'x-grpc-test-echo-initial';
const ECHO_TRAILING = 'x-grpc-test-echo-trailing-bin';
const MAX_RECEIVE = 4 * 1024 * 1024;

function usageExit(msg) {
  process.stderr.write(`grpcjs_server: ${msg}\n`);
  process.exit(2);
}

let flags;
try {
  flags = parseFlags(process.argv.slice(2), {
    port: '0',
    host: '127.0.0.1',
    use_tls: 'false',
    tls_cert_file: '',
    tls_key_file: '',
  });
  flags.use_tls = parseBool('use_tls', flags.use_tls);
} catch (e) {
  usageExit(e.message);
}
const port = Number(flags.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) usageExit(`bad --port ${flags.port}`);

const testing = loadTestingPackage(grpc);

function sleepUs(us) {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, us) / 1000));
}

function payloadOf(size) {
  return { type: 'COMPRESSABLE', body: Buffer.alloc(size) };
}

// Initial metadata to echo back (sent with the response headers).
function echoedInitial(call) {
  const md = new grpc.Metadata();
  for (const v of call.metadata.get(ECHO_INITIAL)) md.add(ECHO_INITIAL, v);
  return md;
}

// Trailers to echo back (sent with the final status, OK or not).
function echoedTrailers(call) {
  const md = new grpc.Metadata();
  for (const v of call.metadata.get(ECHO_TRAILING)) md.add(ECHO_TRAILING, v);
  return md;
}

function sendEchoedInitial(call) {
  if (call.metadata.get(ECHO_INITIAL).length > 0) call.sendMetadata(echoedInitial(call));
}

// A non-OK EchoStatus as a grpc-js error object, or null.
function requestedError(call, echoStatus) {
  if (!echoStatus || !echoStatus.code) return null;
  return { code: echoStatus.code, details: echoStatus.message || '', metadata: echoedTrailers(call) };
}

function unaryResponse(req) {
  const size = req.response_size || 0;
  if (size < 0) return null;
  return size > 0 ? { payload: payloadOf(size) } : {};
}

const handlers = {
  EmptyCall(call, callback) {
    sendEchoedInitial(call);
    callback(null, {}, echoedTrailers(call));
  },

  UnaryCall(call, callback) {
    sendEchoedInitial(call);
    const req = call.request;
    const err = requestedError(call, req.response_status);
    if (err) return callback(err);
    const resp = unaryResponse(req);
    if (!resp) {
      return callback({ code: grpc.status.INVALID_ARGUMENT, details: 'negative response_size', metadata: echoedTrailers(call) });
    }
    callback(null, resp, echoedTrailers(call));
  },

  CacheableUnaryCall(call, callback) {
    handlers.UnaryCall(call, callback);
  },

  StreamingOutputCall(call) {
    sendEchoedInitial(call);
    const req = call.request;
    (async () => {
      for (const p of req.response_parameters || []) {
        if (p.interval_us) await sleepUs(p.interval_us);
        if (call.cancelled) return;
        call.write({ payload: payloadOf(p.size || 0) });
      }
      if (call.cancelled) return;
      const err = requestedError(call, req.response_status);
      if (err) call.emit('error', err);
      else call.end(echoedTrailers(call));
    })().catch((e) => call.emit('error', { code: grpc.status.INTERNAL, details: String(e) }));
  },

  StreamingInputCall(call, callback) {
    sendEchoedInitial(call);
    let total = 0;
    call.on('data', (req) => {
      if (req.payload && req.payload.body) total += req.payload.body.length;
    });
    call.on('end', () => callback(null, { aggregated_payload_size: total }, echoedTrailers(call)));
    call.on('error', () => {});
  },

  FullDuplexCall(call) {
    sendEchoedInitial(call);
    // Requests are answered strictly in order; the chain serializes the sleeps.
    let chain = Promise.resolve();
    let finished = false;
    const finish = (err) => {
      if (finished || call.cancelled) return;
      finished = true;
      if (err) call.emit('error', err);
      else call.end(echoedTrailers(call));
    };
    call.on('data', (req) => {
      chain = chain.then(() => answer(call, req, () => finished)).then((err) => {
        if (err) finish(err);
      });
    });
    call.on('end', () => {
      chain = chain.then(() => finish(null));
    });
    call.on('error', () => {});
  },

  HalfDuplexCall(call) {
    sendEchoedInitial(call);
    const reqs = [];
    call.on('data', (req) => reqs.push(req));
    call.on('end', async () => {
      for (const req of reqs) {
        const err = await answer(call, req, () => false);
        if (err) return call.emit('error', err);
        if (call.cancelled) return;
      }
      if (!call.cancelled) call.end(echoedTrailers(call));
    });
    call.on('error', () => {});
  },
  // UnimplementedCall is deliberately absent: grpc-js answers UNIMPLEMENTED.
};

// Writes the responses one StreamingOutputCallRequest asks for; resolves to
// the error to end the call with (from response_status), or null.
async function answer(call, req, isFinished) {
  for (const p of req.response_parameters || []) {
    if (p.interval_us) await sleepUs(p.interval_us);
    if (call.cancelled || isFinished()) return null;
    call.write({ payload: payloadOf(p.size || 0) });
  }
  return requestedError(call, req.response_status);
}

const server = new grpc.Server({
  'grpc.max_receive_message_length': MAX_RECEIVE,
  'grpc.max_send_message_length': -1,
});
server.addService(testing.TestService.service, handlers);

let creds;
if (flags.use_tls) {
  if (!flags.tls_cert_file || !flags.tls_key_file) usageExit('--use_tls=true needs --tls_cert_file and --tls_key_file');
  creds = grpc.ServerCredentials.createSsl(
    null,
    [{ cert_chain: fs.readFileSync(flags.tls_cert_file), private_key: fs.readFileSync(flags.tls_key_file) }],
    false,
  );
} else {
  creds = grpc.ServerCredentials.createInsecure();
}

const hostPart = flags.host.includes(':') ? `[${flags.host}]` : flags.host;
server.bindAsync(`${hostPart}:${port}`, creds, (err, boundPort) => {
  if (err) {
    process.stderr.write(`grpcjs_server: bind failed: ${err.message}\n`);
    process.exit(1);
  }
  process.stdout.write(`listening on port ${boundPort}\n`);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.forceShutdown();
    process.exit(0);
  });
}
