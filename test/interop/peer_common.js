'use strict';
// Shared bits of the grpc-js test peers: flag parsing and loading the repo's
// grpc.testing protos with @grpc/proto-loader.

const path = require('path');

const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');

// Parses `--name=value` and `--name value` into an object. Unknown flags are
// an error so typos in the harness show up at once.
function parseFlags(argv, defaults) {
  const out = Object.assign({}, defaults);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new Error(`unexpected argument ${arg}`);
    let name;
    let value;
    const eq = arg.indexOf('=');
    if (eq >= 0) {
      name = arg.slice(2, eq);
      value = arg.slice(eq + 1);
    } else {
      name = arg.slice(2);
      if (i + 1 >= argv.length) throw new Error(`flag --${name} needs a value`);
      value = argv[++i];
    }
    if (!(name in defaults)) throw new Error(`unknown flag --${name}`);
    out[name] = value;
  }
  return out;
}

function parseBool(name, value) {
  if (value === true || value === 'true' || value === '1') return true;
  if (value === false || value === 'false' || value === '0' || value === '') return false;
  throw new Error(`--${name} must be true or false, got ${value}`);
}

function loadTestingPackage(grpc) {
  const protoLoader = require('@grpc/proto-loader');
  const def = protoLoader.loadSync('grpc/testing/test.proto', {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: false,
    oneofs: false,
  });
  return grpc.loadPackageDefinition(def).grpc.testing;
}

module.exports = { parseFlags, parseBool, loadTestingPackage, PROTO_ROOT };
