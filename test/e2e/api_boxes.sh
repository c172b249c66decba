#!/usr/bin/env bash
# cocoonbox api end to end, the Boxes contract beyond the basic lifecycle: a grpc-js client
# (the contract is plain gRPC), Boxes.Watch (the list at once and after each change, never
# waking a hibernated box), Recreate with and without preserve_data (a /workspace file kept or
# gone, the machine and the agent restarted), and the statuses for quotas, unknown boxes and
# missing tokens. Real binary, temp data dir, real boxes.
# Usage: api_boxes.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
client=("/usr/bin/python3" "$here/boxes_client.py")
js_client=(node "$here/boxes_js_client.js")
watch_pids=()

call() { "${client[@]}" --port "$port" "$@"; }
js() { "${js_client[@]}" --port "$port" "$@"; }
# Runs a client command that must fail; prints its "CODE: message" line (stderr).
refused() {
  local err rc
  set +e
  err=$("$@" 2>&1 >/dev/null); rc=$?
  set -e
  [[ $rc == 1 ]] || { echo "exit $rc: $err"; return 0; }
  echo "$err"
}
# Waits (bounded) until a line of the Watch output FILE, from line FROM (0-based) on, satisfies
# EXPR; in EXPR, s("name") is that box's state in the line's list (None when not listed).
# Prints the index of the first such line.
watch_line() {
  local file=$1 from=$2 expr=$3
  for _ in $(seq 1 600); do
    if /usr/bin/python3 - "$file" "$from" "$expr" <<'EOF'; then return 0; fi
import json, sys
lines = open(sys.argv[1]).read().split("\n")[:-1]  # complete lines only
for i in range(int(sys.argv[2]), len(lines)):
    v = json.loads(lines[i])
    s = lambda name: next((b["state"] for b in v if b["name"] == name), None)
    if eval(sys.argv[3], {"s": s, "v": v}):
        print(i)
        sys.exit(0)
sys.exit(1)
EOF
    sleep 0.05
  done
  return 1
}
# Runs the op's WatchOperation to the end and checks it finished DONE.
op_done() {
  local phases
  phases=$(call watch-op "$(json 'v["operation"]' <<<"$1")") || return 1
  grep -q PHASE_DONE <<<"$phases"
}

command -v node >/dev/null || fail "node is not installed (run scripts/setup)"
if [[ ! -d $here/../interop/node_modules/@grpc/grpc-js || ! -d $here/../interop/node_modules/@grpc/proto-loader ]]; then
  (cd "$here/../interop" && npm ci --no-audit --no-fund --loglevel=error) >&2 || fail "npm ci in test/interop"
fi

start_api
COCOONBOX_TOKEN=$(cat "$data/admin.token") || fail "no admin.token"
export COCOONBOX_TOKEN
admin() { "$bin" api --data-dir "$data" "$@"; }
# carol may run two boxes (Watch); bob two boxes, one running at a time (quotas).
admin user add carol --max-boxes 4 --max-running 2 >/dev/null || fail "user add carol"
carol=$(admin token issue carol 2>/dev/null) || fail "token issue carol"
admin user add bob --max-boxes 2 --max-running 1 >/dev/null || fail "user add bob"
bob=$(admin token issue bob 2>/dev/null) || fail "token issue bob"
# The running api loads new tokens within a second.
for _ in $(seq 1 100); do
  COCOONBOX_TOKEN=$bob call list >/dev/null 2>&1 && break
  sleep 0.05
done

# 1. grpc-js: the contract is plain gRPC.
[[ $(js list) == "[]" ]] || fail "grpc-js List on a new api: $(js list)"
box=$(js ensure --wait) || fail "grpc-js Ensure: $box"
[[ $(json 'v["state"]' <<<"$box") == STATE_RUNNING ]] || fail "grpc-js Ensure gave $box"
[[ $(json 'v["name"]' <<<"$box") == main ]] || fail "grpc-js Ensure default name: $box"
main_id=$(json 'v["id"]' <<<"$box")
listed=$(js list)
[[ $(json 'len(v), v[0]["id"], v[0]["state"]' <<<"$listed") == "(1, '$main_id', 'STATE_RUNNING')" ]] ||
  fail "grpc-js List after Ensure: $listed"
err=$(refused js ensure --name Bad_Name)
[[ $err == INVALID_ARGUMENT:* ]] || fail "grpc-js bad name: $err"
err=$(COCOONBOX_TOKEN='' refused js list)
[[ $err == UNAUTHENTICATED:* ]] || fail "grpc-js without a token: $err"
ok "grpc-js: List, Ensure(wait) -> RUNNING, INVALID_ARGUMENT and UNAUTHENTICATED as grpc-js sees them"

# 2. Boxes.Watch, as user carol who may run two boxes.
COCOONBOX_TOKEN=$carol call ensure --name w1 --wait >/dev/null || fail "ensure w1"
w1_id=$(COCOONBOX_TOKEN=$carol call get --name w1 | json 'v["id"]')
COCOONBOX_TOKEN=$carol call watch >"$tmp/watch1" 2>"$tmp/watch1.err" &
watch_pids+=($!)
first=$(watch_line "$tmp/watch1" 0 'len(v) == 1 and s("w1") == "STATE_RUNNING"') ||
  fail "Watch did not send the list at once: $(cat "$tmp/watch1" "$tmp/watch1.err")"
[[ $first == 0 ]] || fail "Watch's first list is not the current one: $(cat "$tmp/watch1")"
COCOONBOX_TOKEN=$carol call ensure --name w2 --wait >/dev/null || fail "ensure w2"
at=$(watch_line "$tmp/watch1" 1 's("w1") == "STATE_RUNNING" and s("w2") == "STATE_RUNNING"') ||
  fail "Watch did not show w2 RUNNING: $(cat "$tmp/watch1")"
op=$(COCOONBOX_TOKEN=$carol call hibernate --name w1) || fail "hibernate w1: $op"
COCOONBOX_TOKEN=$carol op_done "$op" || fail "hibernate w1 did not finish"
at=$(watch_line "$tmp/watch1" $((at + 1)) 's("w1") == "STATE_HIBERNATED" and s("w2") == "STATE_RUNNING"') ||
  fail "Watch did not show w1 HIBERNATED: $(cat "$tmp/watch1")"
ok "Watch: the list at once, then lists after Ensure of a second box and a Hibernate"

# A Watch opened on a hibernated box sends it as it is and leaves it frozen.
COCOONBOX_TOKEN=$carol call watch >"$tmp/watch2" 2>"$tmp/watch2.err" &
watch_pids+=($!)
watch_line "$tmp/watch2" 0 's("w1") == "STATE_HIBERNATED" and s("w2") == "STATE_RUNNING"' >/dev/null ||
  fail "a second Watch: $(cat "$tmp/watch2" "$tmp/watch2.err")"
[[ $(COCOONBOX_TOKEN=$carol call get --name w1 | json 'v["state"]') == STATE_HIBERNATED ]] ||
  fail "w1 is no longer hibernated while watched"
cg=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("cgroup",""))' "$data/boxes/$w1_id/machine.json")
if [[ -n $cg && -f $cg/cgroup.freeze ]]; then
  grep -qx 'frozen 1' "$cg/cgroup.events" || fail "w1's cgroup is not frozen while watched: $(cat "$cg/cgroup.events")"
else
  # SIGSTOP freezing: the init is stopped, or has the stop pending (roles/api/machines/README.md).
  /usr/bin/python3 - "/proc/$(machine_pid "$w1_id")/status" <<'EOF' || fail "w1's init is not stopped while watched"
import sys
f = dict(l.split(":", 1) for l in open(sys.argv[1]).read().splitlines() if ":" in l)
stop = 1 << 18  # SIGSTOP (19)
sys.exit(0 if f["State"].split()[0] in ("T", "t") or
         (int(f["SigPnd"], 16) | int(f["ShdPnd"], 16)) & stop else 1)
EOF
fi
/usr/bin/python3 - "$tmp/watch1" "$tmp/watch2" <<'EOF' || fail "a Watch showed w1 leaving HIBERNATED"
import json, sys
for f in sys.argv[1:]:
    seen = False
    for line in open(f).read().split("\n")[:-1]:
        st = next((b["state"] for b in json.loads(line) if b["name"] == "w1"), None)
        if st == "STATE_HIBERNATED":
            seen = True
        elif seen:
            sys.exit(1)
EOF
for p in "${watch_pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
watch_pids=()
ok "Watch never wakes a box: w1 stays HIBERNATED and frozen while two Watches are open"

# 3. Recreate: with preserve_data the /workspace file stays, the machine and agent restart.
ws=$data/boxes/$main_id/workspace
[[ -d $ws ]] || fail "no workspace dir at $ws"
echo "kept across recreate" >"$ws/marker.txt"
pid1=$(machine_pid "$main_id")
hello1=$(call hello) || fail "hello before recreate"
wake1=$(json 'v["wake_id"]' <<<"$hello1")
key1=$(json 'v["public_key"]' <<<"$hello1")
op=$(call recreate --preserve-data) || fail "recreate: $op"
[[ $(json 'v["kind"]' <<<"$op") == recreate ]] || fail "recreate op: $op"
op_done "$op" || fail "recreate (preserve_data) did not finish"
[[ $(call get | json 'v["state"]') == STATE_RUNNING ]] || fail "not RUNNING after recreate"
[[ $(cat "$ws/marker.txt" 2>/dev/null) == "kept across recreate" ]] || fail "workspace file lost with preserve_data"
pid2=$(machine_pid "$main_id")
[[ $pid2 != "$pid1" ]] || fail "machine pid unchanged across recreate ($pid1)"
hello2=$(call hello) || fail "hello after recreate"
wake2=$(json 'v["wake_id"]' <<<"$hello2")
[[ $wake2 != "$wake1" ]] || fail "wake_id unchanged across recreate"
[[ $(json 'v["public_key"]' <<<"$hello2") == "$key1" ]] || fail "box key changed although data was preserved"
ok "Recreate(preserve_data): /workspace file kept, new machine pid and wake_id, same box key"

op=$(call recreate) || fail "recreate without data: $op"
op_done "$op" || fail "recreate (no data) did not finish"
[[ $(call get | json 'v["state"]') == STATE_RUNNING ]] || fail "not RUNNING after recreate without data"
[[ -d $ws && -z $(ls -A "$ws") ]] || fail "workspace not emptied: $(ls -A "$ws" 2>&1)"
pid3=$(machine_pid "$main_id")
[[ $pid3 != "$pid2" ]] || fail "machine pid unchanged across recreate without data"
hello3=$(call hello) || fail "hello after recreate without data"
[[ $(json 'v["wake_id"]' <<<"$hello3") != "$wake2" ]] || fail "wake_id unchanged across recreate without data"
[[ $(json 'v["public_key"]' <<<"$hello3") != "$key1" ]] || fail "box key kept although data was not"
ok "Recreate without preserve_data: /workspace emptied, machine restarted, a new box key"

# 4. Quotas and bad input, as user bob: two boxes, one running at a time.
COCOONBOX_TOKEN=$bob call ensure --name one --wait >/dev/null || fail "bob's first box"
err=$(COCOONBOX_TOKEN=$bob refused call ensure --name two --wait)
[[ $err == RESOURCE_EXHAUSTED:* && $err == *max_running* && $err == *"1 of 1"* ]] ||
  fail "second running box: $err"
[[ $(COCOONBOX_TOKEN=$bob call get --name one | json 'v["state"]') == STATE_RUNNING ]] ||
  fail "bob's first box disturbed by the refused Ensure"
err=$(COCOONBOX_TOKEN=$bob refused js ensure --name two)
[[ $err == RESOURCE_EXHAUSTED:* && $err == *max_running* ]] || fail "grpc-js, second running box: $err"
ok "over max_running: RESOURCE_EXHAUSTED naming max_running (grpcio and grpc-js)"

# A refused Ensure creates nothing: box "two" does not exist.
err=$(COCOONBOX_TOKEN=$bob refused call get --name two)
[[ $err == NOT_FOUND:* ]] || fail "box two after a refused Ensure: $err"
[[ $(COCOONBOX_TOKEN=$bob call list | json 'sorted(b["name"] for b in v)') == "['one']" ]] ||
  fail "bob's list after the refusal: $(COCOONBOX_TOKEN=$bob call list)"
ok "a refused Ensure leaves nothing behind"

# Hibernating the running box frees the slot: the second box may start now.
op=$(COCOONBOX_TOKEN=$bob call hibernate --name one) || fail "hibernate one"
COCOONBOX_TOKEN=$bob op_done "$op" || fail "hibernate one did not finish"
[[ $(COCOONBOX_TOKEN=$bob call ensure --name two --wait | json 'v["state"]') == STATE_RUNNING ]] ||
  fail "box two did not start once one was hibernated"
err=$(COCOONBOX_TOKEN=$bob refused call ensure --name one --wait)
[[ $err == RESOURCE_EXHAUSTED:* && $err == *max_running* ]] || fail "waking over max_running: $err"
[[ $(COCOONBOX_TOKEN=$bob call get --name one | json 'v["state"]') == STATE_HIBERNATED ]] ||
  fail "a refused wake changed box one"
err=$(COCOONBOX_TOKEN=$bob refused call recreate --name one)
[[ $err == RESOURCE_EXHAUSTED:* && $err == *max_running* ]] || fail "recreate over max_running: $err"
[[ $(COCOONBOX_TOKEN=$bob call get --name one | json 'v["state"]') == STATE_HIBERNATED ]] ||
  fail "a refused recreate changed box one"
ok "max_running counts running boxes only: a hibernated box frees its slot; its wake and recreate are refused"

# With nothing running, a third box is over max_boxes.
op=$(COCOONBOX_TOKEN=$bob call hibernate --name two) || fail "hibernate two"
COCOONBOX_TOKEN=$bob op_done "$op" || fail "hibernate two did not finish"
err=$(COCOONBOX_TOKEN=$bob refused call ensure --name three)
[[ $err == RESOURCE_EXHAUSTED:* && $err == *max_boxes* && $err == *"2 of 2"* ]] ||
  fail "third box: $err"
[[ $(COCOONBOX_TOKEN=$bob call list | json 'sorted(b["name"] for b in v)') == "['one', 'two']" ]] ||
  fail "bob's list after refusals: $(COCOONBOX_TOKEN=$bob call list)"
ok "over max_boxes: RESOURCE_EXHAUSTED naming max_boxes, nothing created"

for verb in get hibernate delete recreate; do
  err=$(COCOONBOX_TOKEN=$bob refused call "$verb" --name nosuchbox)
  [[ $err == NOT_FOUND:* ]] || fail "$verb of an unknown box: $err"
done
err=$(COCOONBOX_TOKEN=$bob refused call get --name "$main_id")
[[ $err == NOT_FOUND:* ]] || fail "bob sees admin's box by id: $err"
err=$(COCOONBOX_TOKEN=$bob refused call watch-op "$(json 'v["operation"]' <<<"$op")x")
[[ $err == NOT_FOUND:* ]] || fail "unknown operation: $err"
ok "unknown box (get/hibernate/delete/recreate), another user's box, unknown operation: NOT_FOUND"

for verb in list get ensure hibernate recreate delete watch; do
  err=$(COCOONBOX_TOKEN='' refused call "$verb")
  [[ $err == UNAUTHENTICATED:* ]] || fail "$verb without a token: $err"
done
err=$(COCOONBOX_TOKEN=cbt_not_a_token refused call list)
[[ $err == UNAUTHENTICATED:* ]] || fail "unknown token: $err"
ok "missing or unknown token: UNAUTHENTICATED on every Boxes method"

kill -TERM "$api_pid"
set +e
wait "$api_pid"; rc=$?
set -e
api_pid=""
[[ $rc == 0 ]] || fail "SIGTERM exit $rc"
ok "clean SIGTERM"
echo "$passed passed, 0 failed"
