#!/usr/bin/env bash
# cocoonbox api end to end, as a user meets it: first start on a temp data dir, an admin
# token, a second user, Ensure -> RUNNING, Session.Hello through the edge, Hibernate and a
# transparent wake on the next edge call (new wake_id), ownership and token checks, kill -9 of
# the api and restart (boxes re-adopted, operations ended), Delete, SIGTERM.
# Usage: api_lifecycle.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
client=("/usr/bin/python3" "$here/boxes_client.py")

call() { "${client[@]}" --port "$port" "$@"; }

start_api
[[ -f $data/admin.token ]] || fail "no admin.token after first start"
[[ $(stat -c %a "$data/admin.token") == 600 ]] || fail "admin.token mode is not 600"
[[ $(stat -c %a "$data/master.key") == 600 ]] || fail "master.key mode is not 600"
grep -q "cocoonbox login --endpoint http://127.0.0.1:$port" "$tmp/out" || fail "no login line"
ok "first start: data dir, keys, admin token, login line"

export COCOONBOX_TOKEN=$(cat "$data/admin.token")
"$bin" api --data-dir "$data" user add alice >/dev/null || fail "user add alice"
alice_token=$("$bin" api --data-dir "$data" token issue alice) || fail "token issue alice"
ok "admin CLI: user add, token issue"

box=$(call ensure --wait) || fail "ensure: $box"
[[ $(json 'v["state"]' <<<"$box") == STATE_RUNNING ]] || fail "ensure gave $box"
box_id=$(json 'v["id"]' <<<"$box")
ok "Ensure -> RUNNING ($box_id)"

hello=$(call hello) || fail "hello through the edge"
[[ $(json 'v["box_id"]' <<<"$hello") == "$box_id" ]] || fail "hello box_id: $hello"
[[ $(json 'v["key_len"]' <<<"$hello") == 32 ]] || fail "hello key: $hello"
wake1=$(json 'v["wake_id"]' <<<"$hello")
ok "Session.Hello through the edge"

op=$(call hibernate) || fail "hibernate: $op"
op_id=$(json 'v["operation"]' <<<"$op")
phases=$(call watch-op "$op_id") || fail "watch-op"
grep -q PHASE_DONE <<<"$phases" || fail "hibernate did not finish: $phases"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_HIBERNATED ]] || fail "not hibernated"
ok "Hibernate -> HIBERNATED; WatchOperation streams phases"

hello2=$(call hello) || fail "hello on a hibernated box"
wake2=$(json 'v["wake_id"]' <<<"$hello2")
[[ $wake2 != "$wake1" ]] || fail "wake_id did not change across a wake"
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_RUNNING ]] || fail "edge did not wake the box"
ok "an edge call wakes the box transparently with a new wake_id"

set +e
err=$(COCOONBOX_TOKEN=$alice_token call get 2>&1 >/dev/null); rc=$?
set -e
[[ $rc == 1 && $err == NOT_FOUND* ]] || fail "alice sees admin's box: $err"
set +e
err=$(COCOONBOX_TOKEN=$alice_token call hello --name "$box_id" 2>&1 >/dev/null); rc=$?
set -e
[[ $rc == 1 && $err == NOT_FOUND* ]] || fail "alice reached admin's box: $err"
[[ $(COCOONBOX_TOKEN=$alice_token call list) == "[]" ]] || fail "alice lists admin's boxes"
set +e
err=$(COCOONBOX_TOKEN= call list 2>&1 >/dev/null); rc=$?
set -e
[[ $err == UNAUTHENTICATED* ]] || fail "no token: $err"
set +e
err=$(COCOONBOX_TOKEN=cbt_bogus call hello 2>&1 >/dev/null); rc=$?
set -e
[[ $err == UNAUTHENTICATED* ]] || fail "bad token at the edge: $err"
set +e
err=$(call ensure --name "Bad_Name" 2>&1 >/dev/null); rc=$?
set -e
[[ $err == INVALID_ARGUMENT* ]] || fail "bad name: $err"
ok "ownership (NOT_FOUND), tokens (UNAUTHENTICATED), names (INVALID_ARGUMENT)"

"$bin" api --data-dir "$data" token list alice --json >/dev/null || fail "token list"
tid=$("$bin" api --data-dir "$data" token list alice --json | json 'v[0]["id"]')
"$bin" api --data-dir "$data" token revoke "$tid" >/dev/null || fail "token revoke"
sleep 1.2  # the running api refreshes its token index within a second
set +e
err=$(COCOONBOX_TOKEN=$alice_token call list 2>&1 >/dev/null); rc=$?
set -e
[[ $err == UNAUTHENTICATED* ]] || fail "revoked token still works: $err"
ok "a revoked token stops working without an api restart"

kill -9 "$api_pid"; wait "$api_pid" 2>/dev/null || true; api_pid=""
start_api
[[ $(json 'v["state"]' <<<"$(call get)") == STATE_RUNNING ]] || fail "box not re-adopted: $(call get)"
hello3=$(call hello) || fail "hello after api restart"
[[ $(json 'v["wake_id"]' <<<"$hello3") == "$wake2" ]] || fail "re-adopted box changed wake"
ok "kill -9 of the api: the box keeps running and is re-adopted"

op=$(call delete) || fail "delete"
phases=$(call watch-op "$(json 'v["operation"]' <<<"$op")") || fail "watch delete"
grep -q PHASE_DONE <<<"$phases" || fail "delete did not finish: $phases"
[[ $(call list) == "[]" ]] || fail "box still listed after delete"
[[ ! -d $data/boxes/$box_id ]] || fail "box dir left behind"
ok "Delete releases the machine and its data"

curl -sf "http://127.0.0.1:$port/metrics" | grep -q 'cocoonbox_boxes{state="running"}' || fail "metrics"
kill -TERM "$api_pid"
set +e
wait "$api_pid"; rc=$?
set -e
api_pid=""
[[ $rc == 0 ]] || fail "SIGTERM exit $rc"
ok "/metrics and a clean SIGTERM"
echo "$passed passed, 0 failed"
