#!/usr/bin/env bash
# Idle hibernation (issue 3): with --idle-hibernate 1s a box nobody talks to hibernates by
# itself, a box with an attached client (an rsh call holding an edge stream) never does, and
# the next call wakes it transparently.
# Usage: api_idle.sh PATH_TO_COCOONBOX
set -euo pipefail
bin=$(readlink -f "$1")
tmp=$(mktemp -d)
data=$tmp/data
export XDG_CONFIG_HOME=$tmp/config
api_pid=""
cleanup() {
  [[ -n $api_pid ]] && kill -9 "$api_pid" 2>/dev/null || true
  jobs -p | xargs -r kill 2>/dev/null || true
  if [[ -d $data/boxes ]]; then
    for f in "$data"/boxes/*/machine.json; do
      [[ -f $f ]] || continue
      pid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f" 2>/dev/null || true)
      [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
    done
  fi
  for box_dir in "$data"/boxes/bx_*; do
    for cg in /sys/fs/cgroup/unified/cocoonbox /sys/fs/cgroup/cocoonbox; do
      d=$cg/$(basename "$box_dir")
      [[ -d $d ]] && { echo 1 > "$d/cgroup.kill" 2>/dev/null || true; rmdir "$d" 2>/dev/null || true; }
    done
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- api stderr (tail)" >&2; tail -20 "$tmp/err" >&2 || true
  exit 1
}
passed=0
ok() { passed=$((passed + 1)); echo "ok - $*"; }
state() { "$bin" status --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }

"$bin" api --data-dir "$data" --listen 127.0.0.1:0 --idle-hibernate 1s >"$tmp/out" 2>"$tmp/err" &
api_pid=$!
for _ in $(seq 1 200); do
  port=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" 2>/dev/null | head -1 | sed 's/.*://') || true
  [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.05
done
"$bin" login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
"$bin" ensure >/dev/null 2>&1 || fail "ensure"

# An attached client: an rsh call keeps an edge stream open for 4 s, well past the delay.
"$bin" rsh 'sleep 4' </dev/null &
held=$!
sleep 0.5
[[ $("$bin" status --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["attached_clients"])') == 1 ]] ||
  fail "the rsh call is not counted as attached"
sleep 2.5
[[ $(state) == running ]] || fail "a box with an attached client hibernated: $(state)"
wait "$held" || fail "the held call failed"
ok "a box with an attached client stays RUNNING past the idle delay"

for _ in $(seq 1 60); do [[ $(state) == hibernated ]] && break; sleep 0.1; done
[[ $(state) == hibernated ]] || fail "an idle box did not hibernate: $(state)"
grep -q '"box idle, hibernating"' "$tmp/err" || fail "no log line for the idle hibernation"
ok "an idle box hibernates by itself after --idle-hibernate"

[[ $("$bin" rsh 'echo woke' </dev/null) == woke ]] || fail "the next call did not wake it"
ok "the next call wakes it transparently"
echo "$passed passed, 0 failed"
