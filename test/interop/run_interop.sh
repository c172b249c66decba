#!/usr/bin/env bash
# Interop matrix: cocoonbox's gRPC server and client against third-party peers.
#
#   test/interop/run_interop.sh BUILD_DIR
#
#   our server  (BUILD_DIR/test/interop/interop_server) x {grpc-js client, python client}
#   our client  (BUILD_DIR/test/interop/interop_client) x grpc-js server
#   each x {h2c, tls} x every case, all on 127.0.0.1 with servers on port 0.
#
# Prints a markdown table (case x peer x transport -> pass/FAIL) to stdout, writes it to
# $INTEROP_TABLE too when set, prints the reason of each failed cell to stderr, and exits
# non-zero if any cell failed.
#
# Environment:
#   INTEROP_SELFTEST=1      stand grpcjs_server.js / grpcjs_client.js in for our server / client
#                           (validates the peers; BUILD_DIR is then not needed)
#   INTEROP_CASES="a b"     run only these cases (default: all)
#   INTEROP_TRANSPORTS="h2c" run only these transports (default: "h2c tls")
#   INTEROP_TABLE=PATH      also write the table here
#   INTEROP_PYTHON=PATH     python with grpcio (default /usr/bin/python3, Debian's)
#   INTEROP_CASE_TIMEOUT=S  per-cell time limit in seconds (default 60)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
selftest=${INTEROP_SELFTEST:-0}
python=${INTEROP_PYTHON:-/usr/bin/python3}
case_timeout=${INTEROP_CASE_TIMEOUT:-60}

all_cases=(empty_unary large_unary client_streaming server_streaming ping_pong empty_stream
  cancel_after_begin cancel_after_first_response timeout_on_sleeping_server
  status_code_and_message special_status_message custom_metadata unimplemented_method
  unimplemented_service max_message_under max_message_over)
read -r -a cases <<<"${INTEROP_CASES:-${all_cases[*]}}"
read -r -a transports <<<"${INTEROP_TRANSPORTS:-h2c tls}"

die() {
  echo "run_interop: $*" >&2
  exit 2
}

for t in "${transports[@]}"; do
  [[ $t == h2c || $t == tls ]] || die "unknown transport '$t' (want h2c or tls)"
done
command -v node >/dev/null || die "node is not installed (run scripts/setup)"
command -v openssl >/dev/null || die "openssl is not installed (run scripts/setup)"
command -v protoc >/dev/null || die "protoc is not installed (run scripts/setup)"
"$python" -c 'import grpc, google.protobuf' 2>/dev/null ||
  die "$python lacks grpcio/protobuf (apt-get install python3-grpcio python3-protobuf)"
if [[ ! -d $here/node_modules/@grpc/grpc-js || ! -d $here/node_modules/@grpc/proto-loader ]]; then
  echo "run_interop: installing grpc-js peers (npm ci in test/interop)" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2 || die "npm ci failed in $here"
fi

if [[ $selftest == 1 ]]; then
  ours_name="grpc-js(selftest)"
  ours_server=(node "$here/grpcjs_server.js")
  ours_client=(node "$here/grpcjs_client.js")
else
  [[ $# -ge 1 ]] || die "usage: $0 BUILD_DIR   (or INTEROP_SELFTEST=1 $0)"
  build_dir=$(cd "$1" 2>/dev/null && pwd) || die "build dir '$1' does not exist"
  for b in interop_server interop_client; do
    [[ -x $build_dir/test/interop/$b ]] ||
      die "missing $build_dir/test/interop/$b: build it first (scripts/build --target $b)"
  done
  ours_name=ours
  # shellcheck disable=SC2034 # used through declare -n
  ours_client=("$build_dir/test/interop/interop_client")
  ours_server=("$build_dir/test/interop/interop_server")
fi
peer_server=(node "$here/grpcjs_server.js")
# The client arrays are reached by name (declare -n) from the matrix loop.
# shellcheck disable=SC2034
grpcjs_client=(node "$here/grpcjs_client.js")
# shellcheck disable=SC2034
python_client=("$python" "$here/python_client.py")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cb-interop.XXXXXX")
declare -A server_pid=() server_port=()
cleanup() {
  local p
  for p in "${server_pid[@]}"; do
    kill "$p" 2>/dev/null
  done
  for p in "${server_pid[@]}"; do
    wait "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Throwaway CA and a server certificate for localhost / 127.0.0.1.
make_certs() {
  local d=$tmp/pki
  mkdir -p "$d"
  {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj "/CN=cocoonbox interop throwaway CA" -keyout "$d/ca.key" -out "$d/ca.pem" &&
      openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=localhost" -keyout "$d/server.key" -out "$d/server.csr" &&
      printf '%s\n' 'basicConstraints=critical,CA:FALSE' \
        'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' \
        'subjectAltName=DNS:localhost,IP:127.0.0.1' >"$d/server.ext" &&
      openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -days 2 -extfile "$d/server.ext" -out "$d/server.pem"
  } >"$d/openssl.log" 2>&1 || {
    cat "$d/openssl.log" >&2
    die "openssl failed to make the test certificates"
  }
}
make_certs
ca=$tmp/pki/ca.pem

server_tls_flags() { # transport
  if [[ $1 == tls ]]; then
    echo "--use_tls=true --tls_cert_file=$tmp/pki/server.pem --tls_key_file=$tmp/pki/server.key"
  else
    echo "--use_tls=false"
  fi
}
client_tls_flags() { # transport
  if [[ $1 == tls ]]; then
    echo "--use_tls=true --ca_file=$ca --server_host_override=localhost"
  else
    echo "--use_tls=false"
  fi
}

# start_server KEY TRANSPORT CMD...: starts it on port 0 and reads `listening on port N`.
start_server() {
  local key=$1 transport=$2
  shift 2
  local out=$tmp/server-$key.out err=$tmp/server-$key.err
  # shellcheck disable=SC2046 # the flag string is ours, split on purpose
  "$@" --port=0 $(server_tls_flags "$transport") >"$out" 2>"$err" </dev/null &
  local pid=$! port="" i
  server_pid[$key]=$pid
  for ((i = 0; i < 300; i++)); do
    port=$(sed -n 's/^listening on port \([0-9][0-9]*\)$/\1/p' "$out" | head -n1)
    [[ -n $port ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $port ]]; then
    echo "run_interop: server $key ($*) did not print 'listening on port N' within 30 s" >&2
    tail -n 20 "$err" >&2
    kill "$pid" 2>/dev/null
    unset "server_pid[$key]"
    return 1
  fi
  server_port[$key]=$port
}

# ensure_server KEY TRANSPORT CMD...: (re)starts the server if it is not running.
ensure_server() {
  local key=$1
  if [[ -n ${server_pid[$key]:-} ]] && kill -0 "${server_pid[$key]}" 2>/dev/null; then
    return 0
  fi
  if [[ -n ${server_pid[$key]:-} ]]; then
    local rc=0
    wait "${server_pid[$key]}" 2>/dev/null || rc=$?
    echo "run_interop: server $key exited with status $rc; stderr tail:" >&2
    tail -n 20 "$tmp/server-$key.err" >&2
    unset "server_pid[$key]"
    echo "run_interop: restarting server $key" >&2
  fi
  start_server "$@"
}

# Matrix columns: label | server key | client command variable
columns=()
col_server=()
col_client=()
col_transport=()
add_column() { # label server-kind client-array-name
  local t
  for t in "${transports[@]}"; do
    columns+=("$1 $t")
    col_server+=("$2-$t")
    col_client+=("$3")
    col_transport+=("$t")
  done
}
add_column "grpc-js client → $ours_name server" ours grpcjs_client
add_column "python client → $ours_name server" ours python_client
add_column "$ours_name client → grpc-js server" peer ours_client

declare -A result=()
failures=()
for ci in "${!columns[@]}"; do
  key=${col_server[$ci]}
  transport=${col_transport[$ci]}
  if [[ $key == ours-* ]]; then server=("${ours_server[@]}"); else server=("${peer_server[@]}"); fi
  declare -n client=${col_client[$ci]}
  for c in "${cases[@]}"; do
    if ! ensure_server "$key" "$transport" "${server[@]}"; then
      result["$c|$ci"]=FAIL
      failures+=("$c | ${columns[$ci]}: server did not start")
      continue
    fi
    log=$tmp/client.log
    # shellcheck disable=SC2046
    timeout -k 5 "$case_timeout" "${client[@]}" --server_host=127.0.0.1 \
      --server_port="${server_port[$key]}" --test_case="$c" $(client_tls_flags "$transport") \
      >"$log" 2>&1 </dev/null
    rc=$?
    if [[ $rc == 0 ]]; then
      result["$c|$ci"]=pass
    else
      result["$c|$ci"]=FAIL
      reason=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
      [[ $rc == 124 ]] && reason="timed out after ${case_timeout}s${reason:+; $reason}"
      failures+=("$c | ${columns[$ci]}: exit $rc: ${reason:-no output}")
    fi
  done
  unset -n client
done

table() {
  local ci c line
  line="| case |"
  for ci in "${!columns[@]}"; do line+=" ${columns[$ci]} |"; done
  echo "$line"
  line="| --- |"
  for ci in "${!columns[@]}"; do line+=" --- |"; done
  echo "$line"
  for c in "${cases[@]}"; do
    line="| $c |"
    for ci in "${!columns[@]}"; do line+=" ${result["$c|$ci"]:-skipped} |"; done
    echo "$line"
  done
}

table
if [[ -n ${INTEROP_TABLE:-} ]]; then
  table >"$INTEROP_TABLE"
fi
cells=$((${#cases[@]} * ${#columns[@]}))
if ((${#failures[@]})); then
  echo "run_interop: ${#failures[@]} of $cells cells failed:" >&2
  printf '  %s\n' "${failures[@]}" >&2
  echo "$((cells - ${#failures[@]})) passed, ${#failures[@]} failed"
  exit 1
fi
echo "$cells passed, 0 failed"
