#!/usr/bin/env bash
# cocoonbox api crash safety, end to end: the api is killed with SIGKILL in the middle of an
# Ensure and in the middle of a Hibernate (held there by failpoints, base/failpoint.h), and
# restarted. Each operation is resumed on the same operation id, a watcher resumes its stream
# by offset_key without losing or repeating an event, and the box ends in the state asked for.
# Then `cocoonbox api user rm` run against a live api stops the removed user's box, and a box
# whose machine was killed is started again by the next edge call.
# Usage: api_crash.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
client=("/usr/bin/python3" "$here/boxes_client.py")

call() { "${client[@]}" --port "$port" "$@"; }
# wait_for FILE PATTERN: up to 20 s for PATTERN to appear in FILE.
wait_for() {
  for _ in $(seq 1 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
# check_resumed OP_ID OFFSET: the rest of the operation's events after OFFSET, ending DONE.
check_resumed() {
  local rest
  rest=$(call watch-op "$1" --offset "$2") || fail "watch-op resume: $rest"
  echo "$rest" > "$tmp/rest"
  # Nothing repeated: the first event after the offset is the next one.
  [[ $(head -1 <<<"$rest" | json 'v["offset_key"]') == $(($2 + 1)) ]] || fail "resume repeated or skipped: $rest"
  grep -q 'api restarted; resuming' <<<"$rest" || fail "no resuming event: $rest"
  [[ $(tail -1 <<<"$rest" | json 'v["phase"]') == PHASE_DONE ]] || fail "did not end DONE: $rest"
}

COCOONBOX_FAILPOINTS=boxes.ensure.started=pause start_api
export COCOONBOX_TOKEN=$(cat "$data/admin.token")

# --- kill -9 in the middle of an Ensure ---
box=$(call ensure) || fail "ensure: $box"
box_id=$(json 'v["id"]' <<<"$box")
op=$(json 'v["operation"]' <<<"$box")
[[ $op == op_* ]] || fail "Ensure did not name its operation: $box"
call watch-op "$op" >"$tmp/watch1" 2>/dev/null &
wait_for "$tmp/err" "failpoint reached" || fail "ensure did not reach its failpoint"
wait_for "$tmp/watch1" PHASE_CREATING || fail "watcher saw no phase: $(cat "$tmp/watch1")"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_STARTING ]] || fail "not STARTING mid-ensure"
seen=$(tail -1 "$tmp/watch1" | json 'v["offset_key"]')
kill_api
pid_before=$(machine_pid "$box_id")
ok "Ensure held after the machine started; api killed with SIGKILL"

start_api
check_resumed "$op" "$seen"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_RUNNING ]] || fail "not RUNNING: $(call get)"
[[ $(machine_pid "$box_id") == "$pid_before" ]] || fail "the started machine was replaced"
hello=$(call hello) || fail "hello after the resumed ensure: $hello"
[[ $(json 'v["box_id"]' <<<"$hello") == "$box_id" ]] || fail "hello: $hello"
ok "restart: the Ensure resumed on the same operation and machine; watcher resumed by offset"

# --- kill -9 in the middle of a Hibernate ---
kill -TERM "$api_pid"; wait "$api_pid" 2>/dev/null || true; api_pid=""
COCOONBOX_FAILPOINTS=boxes.hibernate.frozen=pause start_api
op=$(call hibernate | json 'v["operation"]') || fail "hibernate"
wait_for "$tmp/err" "failpoint reached" || fail "hibernate did not reach its failpoint"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_HIBERNATING ]] || fail "not HIBERNATING"
call watch-op "$op" >"$tmp/watch2" 2>/dev/null &
wait_for "$tmp/watch2" PHASE_FREEZING || fail "watcher saw no phase: $(cat "$tmp/watch2")"
seen=$(tail -1 "$tmp/watch2" | json 'v["offset_key"]')
kill_api
ok "Hibernate held after the freeze; api killed with SIGKILL"

start_api
check_resumed "$op" "$seen"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_HIBERNATED ]] || fail "not HIBERNATED: $(call get)"
box=$(call ensure --wait) || fail "wake after the resumed hibernate: $box"
[[ $(json 'v["state"]' <<<"$box") == STATE_RUNNING ]] || fail "wake: $box"
[[ $(machine_pid "$box_id") == "$pid_before" ]] || fail "the machine was replaced across hibernate"
ok "restart: the Hibernate resumed to HIBERNATED; the same machine wakes"

# --- user rm against a live api ---
"$bin" api --data-dir "$data" user add carol >/dev/null || fail "user add carol"
carol=$("$bin" api --data-dir "$data" token issue carol 2>/dev/null) || fail "token issue carol"
sleep 1.2  # a running api picks up admin changes within a second
cbox=$(COCOONBOX_TOKEN=$carol call ensure --wait) || fail "carol ensure: $cbox"
cbox_id=$(json 'v["id"]' <<<"$cbox")
cpid=$(machine_pid "$cbox_id")
kill -0 "$cpid" || fail "carol's machine is not running"
"$bin" api --data-dir "$data" user rm carol >/dev/null || fail "user rm carol"
for _ in $(seq 1 100); do [[ -d $data/boxes/$cbox_id ]] || break; sleep 0.05; done
[[ ! -d $data/boxes/$cbox_id ]] || fail "carol's box dir is still there"
! kill -0 "$cpid" 2>/dev/null || [[ $(cat /proc/$cpid/stat 2>/dev/null | awk '{print $3}') == Z ]] \
  || fail "carol's machine still runs"
set +e
err=$(COCOONBOX_TOKEN=$carol call list 2>&1 >/dev/null)
set -e
[[ $err == UNAUTHENTICATED* ]] || fail "removed user's token: $err"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_RUNNING ]] || fail "admin's box was touched"
ok "user rm on a live api: the user's box is released within seconds, its token refused"

# --- a box whose machine died under it is started again by the next edge call ---
wake_before=$(call hello | json 'v["wake_id"]') || fail "hello before the machine is killed"
mpid=$(machine_pid "$box_id")
kill -9 "$mpid"
sleep 0.3
hello=$(call hello) || fail "hello after the machine was killed: $hello"
[[ $(json 'v["wake_id"]' <<<"$hello") != "$wake_before" ]] || fail "the same wake answered"
[[ $(machine_pid "$box_id") != "$mpid" ]] || fail "no new machine"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_RUNNING ]] || fail "not RUNNING: $(call get)"
ok "a machine killed under a RUNNING box is restarted, with its data, by the next edge call"

echo "$passed passed, 0 failed"
