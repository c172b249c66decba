# Shared by the end-to-end scripts: a temp dir with the api's data dir, cleanup of everything
# a test started, the api started on a free loopback port, and small helpers.
#
#   source "$(dirname "$0")/lib.sh" "$1"     # sets bin, here, tmp, data; installs the trap
#   start_api [API FLAGS...]                   # sets api_pid and port (kept across restarts)
#   idle_hibernate=1s start_api                # default --idle-hibernate 0
#   COCOONBOX_FAILPOINTS=... start_api         # with failpoints (base/failpoint.h)
#   e2e_cleanup_hook() { ...; }                # optional: runs first at exit
#   ok "what passed"; fail "what went wrong"; json 'v["state"]' <<<"$reply"
set -euo pipefail
bin=$(readlink -f "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
data=$tmp/data
api_pid=""
port=""
passed=0

e2e_cleanup() {
  if declare -F e2e_cleanup_hook >/dev/null; then e2e_cleanup_hook || true; fi
  [[ -n $api_pid ]] && kill -9 "$api_pid" 2>/dev/null || true
  jobs -p | xargs -r kill -9 2>/dev/null || true
  # Boxes outlive the api by design: stop the machines this test started, and only those
  # (other tests, benchmarks and people may run boxes on this machine).
  local f pid box_dir cg d
  for f in "$data"/boxes/*/machine.json; do
    [[ -f $f ]] || continue
    pid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f" 2>/dev/null || true)
    [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
  done
  for box_dir in "$data"/boxes/bx_*; do
    for cg in /sys/fs/cgroup/unified/cocoonbox /sys/fs/cgroup/cocoonbox; do
      d=$cg/$(basename "$box_dir")
      [[ -d $d ]] && { echo 1 > "$d/cgroup.kill" 2>/dev/null || true; rmdir "$d" 2>/dev/null || true; }
    done
  done
  rm -rf "$tmp"
}
trap e2e_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- api stderr (tail)" >&2
  tail -20 "$tmp/err" >&2 || true
  exit 1
}
ok() {
  passed=$((passed + 1))
  echo "ok - $*"
}
json() { /usr/bin/python3 -c 'import json,sys; v=json.load(sys.stdin); print(eval(sys.argv[1], {"v": v}))' "$1"; }
machine_pid() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$data/boxes/$1/machine.json"; }

# Starts the api and waits for /healthz. The first start picks a free port; restarts reuse it,
# so clients keep their endpoint.
start_api() {
  "$bin" api --data-dir "$data" --listen "127.0.0.1:${port:-0}" \
    --idle-hibernate "${idle_hibernate:-0}" "$@" \
    >"$tmp/out" 2>"$tmp/err" &
  api_pid=$!
  for _ in $(seq 1 200); do
    if [[ -z $port ]]; then
      port=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" 2>/dev/null | head -1 | sed 's/.*://') || true
    fi
    if [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then return 0; fi
    kill -0 "$api_pid" 2>/dev/null || fail "api exited at start"
    sleep 0.05
  done
  fail "api did not become healthy"
}
kill_api() {
  kill -9 "$api_pid"
  wait "$api_pid" 2>/dev/null || true
  api_pid=""
}
