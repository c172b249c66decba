#!/usr/bin/env bash
# MCP interop: cocoonbox's src/mcp against the MCP TypeScript SDK (pinned in package.json).
#
#   test/interop/run_mcp_interop.sh BUILD_DIR
#
#   SDK client (mcp_sdk_client.mjs) -> our server (BUILD_DIR/test/interop/mcp_test_server)
#       over stdio and over Streamable HTTP;
#   our client (BUILD_DIR/test/interop/mcp_interop_client) -> SDK server (mcp_sdk_server.mjs)
#       over HTTP/2 (h2c) and HTTP/1.1.
# Everything listens on 127.0.0.1 port 0. Prints one line per pairing and exits non-zero if
# any failed (its output goes to stderr).
#
# Environment: MCP_INTEROP_TIMEOUT=S  per-pairing time limit in seconds (default 120).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
limit=${MCP_INTEROP_TIMEOUT:-120}
die() {
  echo "run_mcp_interop: $*" >&2
  exit 2
}
[[ $# -ge 1 ]] || die "usage: $0 BUILD_DIR"
build_dir=$(cd "$1" 2>/dev/null && pwd) || die "build dir '$1' does not exist"
command -v node >/dev/null || die "node is not installed (run scripts/setup)"
for b in mcp_test_server mcp_interop_client; do
  [[ -x $build_dir/test/interop/$b ]] ||
    die "missing $build_dir/test/interop/$b: build it first (scripts/build --target $b)"
done
if [[ ! -d $here/node_modules/@modelcontextprotocol/sdk || ! -d $here/node_modules/zod ]]; then
  echo "run_mcp_interop: installing the MCP SDK (npm ci in test/interop)" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2 || die "npm ci failed in $here"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cb-mcp-interop.XXXXXX")
server_pid=""
stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
  fi
}
cleanup() {
  stop_server
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server CMD...: runs it in the background and sets $port from "listening on port N".
start_server() {
  "$@" >"$tmp/server.out" 2>"$tmp/server.err" </dev/null &
  server_pid=$!
  port=""
  local i
  for ((i = 0; i < 300; i++)); do
    port=$(sed -n 's/^listening on port \([0-9][0-9]*\)$/\1/p' "$tmp/server.out" | head -n1)
    [[ -n $port ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "run_mcp_interop: server ($*) did not print 'listening on port N'" >&2
  tail -n 20 "$tmp/server.err" >&2
  stop_server
  return 1
}

failed=0
# pairing NAME CMD...: runs one client, records pass/FAIL.
pairing() {
  local name=$1
  shift
  if timeout -k 5 "$limit" "$@" >"$tmp/client.log" 2>&1 </dev/null; then
    echo "pass  $name ($(grep -c '^ok ' "$tmp/client.log") checks)"
  else
    echo "FAIL  $name"
    echo "---- $name: client output" >&2
    tail -n 30 "$tmp/client.log" >&2
    if [[ -f $tmp/server.err ]]; then
      echo "---- $name: server stderr" >&2
      tail -n 20 "$tmp/server.err" >&2
    fi
    failed=$((failed + 1))
  fi
}

server=$build_dir/test/interop/mcp_test_server
pairing "SDK client -> our server, stdio" node "$here/mcp_sdk_client.mjs" stdio "$server"

if start_server "$server" --http --port=0; then
  pairing "SDK client -> our server, Streamable HTTP" \
    node "$here/mcp_sdk_client.mjs" http "http://127.0.0.1:$port/mcp"
  stop_server
else
  echo "FAIL  SDK client -> our server, Streamable HTTP (server did not start)"
  failed=$((failed + 1))
fi

for proto in h2c http1; do
  flag=""
  [[ $proto == h2c ]] && flag=--h2c
  # shellcheck disable=SC2086 # $flag is empty or one word
  if start_server node "$here/mcp_sdk_server.mjs" --port=0 $flag; then
    pairing "our client -> SDK server, $proto" \
      "$build_dir/test/interop/mcp_interop_client" --port="$port" --protocol="$proto"
    stop_server
  else
    echo "FAIL  our client -> SDK server, $proto (server did not start)"
    failed=$((failed + 1))
  fi
done

if ((failed)); then
  echo "run_mcp_interop: $failed pairing(s) failed" >&2
  exit 1
fi
echo "all MCP interop pairings passed"
