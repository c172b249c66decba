#!/usr/bin/env bash
# `cocoonbox agent` as the box runs it: the real binary on a unix socket (and loopback TCP),
# called by a third-party client (Python grpcio) with credentials minted by a test helper that
# plays the api. Checks Hello, refusals, identity reload on a new wake, an Exec (bidi stream:
# stdin through cat, stderr apart, the exit code), SIGTERM (exit 0, socket removed), box key
# reuse, and a restart after SIGKILL.
#
# Usage: agent_e2e.sh PATH_TO_COCOONBOX PATH_TO_MINT_CREDENTIAL PROTO_ROOT
set -euo pipefail
bin=$(readlink -f "$1")
mint=$(readlink -f "$2")
proto_root=$(readlink -f "$3")
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
# The client peer needs Debian's python3-grpcio and protoc; without them there is nothing to
# run (exit 77: ctest reports the test as skipped).
if ! "$py" -c 'import grpc, google.protobuf' 2>/dev/null || ! command -v protoc >/dev/null; then
  echo "SKIP: needs /usr/bin/python3 with grpcio and protobuf, and protoc"
  exit 77
fi
tmp=$(mktemp -d /tmp/cb-agent-e2e-XXXXXX)
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  [[ -f $tmp/log ]] && { echo "--- agent log" >&2; cat "$tmp/log" >&2; }
  exit 1
}

sock=$tmp/agent.sock
mkdir "$tmp/ws"
ident=$tmp/identity
data=$tmp/data
seed=42
key_id="edge-e2e"
box="box-e2e"

start_agent() {
  : >"$tmp/out"
  "$bin" agent --socket "$sock" --identity "$ident" --data-dir "$data" --listen 127.0.0.1:0 \
    --workspace "$tmp/ws" >"$tmp/out" 2>>"$tmp/log" &
  pid=$!
  for _ in $(seq 100); do
    grep -q '^listening on unix:' "$tmp/out" 2>/dev/null && [[ -S $sock ]] && return 0
    kill -0 "$pid" 2>/dev/null || fail "agent exited during start"
    sleep 0.1
  done
  fail "agent did not start listening within 10 s"
}

stop_agent() {  # SIGTERM; want exit 0 and the socket gone
  kill -TERM "$pid"
  set +e
  wait "$pid"
  local rc=$?
  set -e
  pid=
  [[ $rc == 0 ]] || fail "agent exited $rc after SIGTERM, want 0"
  [[ ! -e $sock ]] || fail "socket $sock still exists after SIGTERM"
}

# The client's message module, generated once.
mkdir "$tmp/pb"
protoc -I"$proto_root" --python_out="$tmp/pb" "$proto_root/cocoonbox/agent/v1/agents.proto" \
  "$proto_root/cocoonbox/agent/v1/session.proto"

hello() {  # hello [CREDENTIAL] -> JSON on stdout; exit status of the client
  if [[ $# -gt 0 ]]; then
    "$py" "$here/hello_client.py" --pb_dir="$tmp/pb" --socket="$sock" --credential="$1"
  else
    "$py" "$here/hello_client.py" --pb_dir="$tmp/pb" --socket="$sock"
  fi
}

field() {  # field JSON NAME
  "$py" -c 'import json,sys; v=json.loads(sys.argv[1])[sys.argv[2]]; print(json.dumps(v) if isinstance(v, list) else v)' "$1" "$2"
}

want_refused() {  # want_refused CODE WHAT [CREDENTIAL]
  local code=$1 what=$2 out
  shift 2
  set +e
  out=$(hello "$@")
  local rc=$?
  set -e
  [[ $rc == 1 ]] || fail "$what: client exited $rc ($out), want a refusal"
  [[ $(field "$out" code) == "$code" ]] || fail "$what: $out, want $code"
}

version=$("$bin" --version | awk '{print $2}')

# --- usage
set +e
"$bin" agent --data-dir "$data" --listen 0.0.0.0:7000 >/dev/null 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 2 ]] || fail "non-loopback --listen exited $rc, want 2"
grep -q "loopback" "$tmp/err" || fail "non-loopback --listen message: $(cat "$tmp/err")"
[[ $("$bin" agent --version) == "cocoonbox agent $version" ]] || fail "agent --version"
"$bin" --help | grep -qE '^  agent ' || fail "cocoonbox --help does not list the agent role"

# --- first start, before the identity is delivered
start_agent
grep -qE '^listening on 127\.0\.0\.1:[1-9][0-9]*$' "$tmp/out" || fail "no TCP address printed: $(cat "$tmp/out")"
[[ $(stat -c %a "$sock") == 660 ]] || fail "socket mode $(stat -c %a "$sock"), want 660"
[[ $(stat -c %a "$data") == 700 ]] || fail "data dir mode $(stat -c %a "$data"), want 700"
[[ $(stat -c %a "$data/box.key") == 600 ]] || fail "box.key mode $(stat -c %a "$data/box.key"), want 600"

cred1=$("$mint" credential $seed $key_id $box wake-1 +600)
want_refused UNAVAILABLE "before the identity is delivered" "$cred1"

"$mint" identity $seed $key_id $box wake-1 >"$ident"
out=$(hello "$cred1") || fail "Hello: $out"
[[ $(field "$out" box_id) == "$box" ]] || fail "box_id in $out"
[[ $(field "$out" wake_id) == wake-1 ]] || fail "wake_id in $out"
[[ $(field "$out" agent_version) == "$version" ]] || fail "agent_version in $out, want $version"
[[ $(field "$out" capabilities) == '["session.hello", "session.exec", "session.events", "agents"]' ]] || fail "capabilities in $out"
key1=$(field "$out" box_public_key)
[[ ${#key1} == 64 ]] || fail "box_public_key $key1 is not 32 bytes"

want_refused UNAUTHENTICATED "no credential"
want_refused UNAUTHENTICATED "garbage credential" "garbage"
want_refused UNAUTHENTICATED "other box" "$("$mint" credential $seed $key_id box-other wake-1 +600)"
want_refused UNAUTHENTICATED "expired" "$("$mint" credential $seed $key_id $box wake-1 -300)"
want_refused UNAUTHENTICATED "other key" "$("$mint" credential 7 $key_id $box wake-1 +600)"

# --- Exec from grpcio: 3 MiB through cat, stderr apart, the exit code, the workspace as cwd
head -c $((3 << 20)) /dev/urandom >"$tmp/random"
out=$("$py" "$here/exec_client.py" --pb_dir="$tmp/pb" --socket="$sock" --credential="$cred1" \
  --command='cat; echo to-stderr >&2; pwd >&2; exit 3' --stdin_file="$tmp/random") ||
  fail "Exec: $out"
[[ $(field "$out" stdout_sha256) == $(sha256sum <"$tmp/random" | cut -d' ' -f1) ]] ||
  fail "Exec: stdout differs from stdin: $out"
[[ $(field "$out" exit_code) == 3 ]] || fail "Exec: exit code in $out, want 3"
[[ $(field "$out" stderr) == "to-stderr"$'\n'"$tmp/ws" ]] || fail "Exec: stderr in $out"
[[ $(field "$out" credited) == $((3 << 20)) ]] || fail "Exec: stdin credit in $out"
set +e
out=$("$py" "$here/exec_client.py" --pb_dir="$tmp/pb" --socket="$sock" --credential="$cred1" \
  --command=pwd --cwd="$tmp/no-such-dir")
rc=$?
set -e
[[ $rc == 1 && $(field "$out" code) == FAILED_PRECONDITION ]] || fail "Exec with a bad cwd: $out"

# --- a wake: new wake_id, old credentials die
"$mint" identity $seed $key_id $box wake-2 >"$ident"
want_refused UNAUTHENTICATED "previous wake" "$cred1"
cred2=$("$mint" credential $seed $key_id $box wake-2 +600)
out=$(hello "$cred2") || fail "Hello after wake: $out"
[[ $(field "$out" wake_id) == wake-2 ]] || fail "wake_id after wake in $out"

stop_agent

# Logs: JSON lines, the reload is there, no credential ever is.
"$py" -c '
import json, sys
for line in open(sys.argv[1]):
    json.loads(line)
' "$tmp/log" || fail "agent log is not JSON lines"
grep -q '"msg":"identity reloaded".*"wake_id":"wake-2"' "$tmp/log" || fail "no identity reload logged"
grep -q '"msg":"call refused"' "$tmp/log" || fail "no refusal logged"
for c in "$cred1" "$cred2"; do
  ! grep -qF "${c##*.}" "$tmp/log" || fail "a credential leaked into the log"
done

# --- restart: same box key
start_agent
out=$(hello "$cred2") || fail "Hello after restart: $out"
[[ $(field "$out" box_public_key) == "$key1" ]] || fail "box key changed across a restart"

# --- SIGKILL leaves a stale socket and an unclosed database; the next start copes
kill -KILL "$pid"
{ wait "$pid"; } 2>/dev/null || true
pid=
[[ -S $sock ]] || fail "expected a stale socket after SIGKILL"
start_agent
out=$(hello "$cred2") || fail "Hello after SIGKILL and restart: $out"
[[ $(field "$out" box_public_key) == "$key1" ]] || fail "box key changed after a crash"
stop_agent
starts=$("$py" -c '
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("SELECT count(*) FROM agent_starts").fetchone()[0])
' "$data/agent.db")
[[ $starts == 3 ]] || fail "agent_starts has $starts rows, want 3"

echo "1 passed, 0 failed"
