#!/usr/bin/env bash
# Idle hibernation (issue 3): with --idle-hibernate 1s a box nobody talks to hibernates by
# itself, a box with an attached client (an rsh call holding an edge stream) never does, and
# the next call wakes it transparently.
# Usage: api_idle.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
state() { "$bin" status --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }

idle_hibernate=1s start_api
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
