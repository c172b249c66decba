#!/usr/bin/env bash
# The model door end to end (seed §12.2, issue 6 item 3): no gateway key in the box.
# A fake of the paid gateway (test/support/fake_gateway.py) requires a known key. The admin
# gives the user that gateway and key (`api user set-gateway`, key on stdin); from inside the box
# (`cocoonbox rsh`, curl on /run/cocoonbox/model.sock, sending keys of its own) calls on both
# wires reach the fake with the right key in the right field, streams arrive while the gateway is
# still sending, usage lands in api.db (`api usage --json`) and /metrics; without a gateway the
# door answers 503 in the wire's shape; the api's default gateway (--gateway-url,
# --gateway-key-file) applies; an api restart re-opens the door of a box that kept running, and
# a hibernate and wake keep it.
# Then the key is searched for everywhere the box can see or keep it: the box's whole data dir
# (workspace, home, agent.db, run dir, logs), and the environment and argv of every process of
# the box. It is in none, and not in api.db in plaintext either.
# Usage: api_model_door.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
py=/usr/bin/python3
rsh() { "$bin" rsh --box main "$@"; }
admin() { "$bin" api --data-dir "$data" "$@"; }

# --- the fake gateway, on a loopback port of its own ---
"$py" "$here/../support/fake_gateway.py" >"$tmp/gw.out" 2>"$tmp/gw.err" &
for _ in $(seq 1 200); do [[ -s $tmp/gw.out ]] && break; sleep 0.05; done
gw_port=$(head -1 "$tmp/gw.out")
[[ $gw_port =~ ^[0-9]+$ ]] || fail "the fake gateway did not start: $(cat "$tmp/gw.err")"
gw="http://127.0.0.1:$gw_port"
key="sk-e2e-door-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
default_key="sk-e2e-default-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# script JSON_TURNS KEY: replaces the fake's turns and the key it requires.
script() {
  curl -sf -X POST -H 'content-type: application/json' "$gw/_fake/script" \
    --data "{\"key\": \"$2\", \"turns\": $1}" >/dev/null || fail "script the fake gateway"
}
# The requests the fake received since the last script(), as a JSON list.
requests() {
  curl -sf "$gw/_fake/requests" | "$py" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["requests"]))'
}

start_api
"$bin" login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
printf '%s\n' "$key" | admin user set-gateway admin --url "$gw" --key-file - >"$tmp/set.out" 2>&1 ||
  fail "set-gateway: $(cat "$tmp/set.out")"
! grep -qF "$key" "$tmp/set.out" || fail "set-gateway printed the key"
"$bin" ensure >/dev/null 2>&1 || fail "ensure"
box_id=$("$bin" status --json | json 'v["id"]')
box_dir=$data/boxes/$box_id
[[ -S $box_dir/run/model.sock ]] || fail "no door socket in $box_dir/run"
[[ $(stat -c %a "$box_dir/run/model.sock") == 666 ]] || fail "door socket mode $(stat -c %a "$box_dir/run/model.sock")"
ok "set-gateway took the key on stdin and printed it nowhere; the box's door is $box_dir/run/model.sock"

# The door as the box sees it. The box also sends keys of its own: they must not get through.
door_curl='curl -sS -N --unix-socket /run/cocoonbox/model.sock -H "content-type: application/json" -H "authorization: Bearer box-own-key" -H "x-api-key: box-own-key" -H "x-cocoonbox-box: bx_other"'
openai_req='{"model":"gpt-e2e","stream":true,"stream_options":{"include_usage":true},
  "messages":[{"role":"user","content":"hi"}]}'
anthropic_req='{"model":"claude-e2e","stream":true,"max_tokens":64,
  "messages":[{"role":"user","content":"hi"}]}'

# --- OpenAI wire, streamed ---
script '[{"wire":"openai","chunks":["through ","the ","door"],
  "usage":{"input_tokens":21,"output_tokens":3}}]' "$key"
rsh "$door_curl"' http://door/v1/chat/completions --data-binary @-' <<<"$openai_req" >"$tmp/openai.sse" ||
  fail "curl in the box: $(cat "$tmp/openai.sse")"
grep -q '"content":"through "' "$tmp/openai.sse" || fail "no stream: $(cat "$tmp/openai.sse")"
grep -q '"content":"door"' "$tmp/openai.sse" || fail "stream incomplete: $(cat "$tmp/openai.sse")"
grep -qx 'data: \[DONE\]' "$tmp/openai.sse" || fail "no [DONE]: $(cat "$tmp/openai.sse")"
requests >"$tmp/reqs.json"
json 'v[0]["headers"]["authorization"]' <"$tmp/reqs.json" >"$tmp/h.auth"
[[ $(cat "$tmp/h.auth") == "Bearer $key" ]] || fail "the gateway got authorization '$(cat "$tmp/h.auth")'"
[[ $(json '"x-api-key" in v[0]["headers"] or "x-cocoonbox-box" in v[0]["headers"]' <"$tmp/reqs.json") == False ]] ||
  fail "a field from the box got through: $(json 'v[0]["headers"]' <"$tmp/reqs.json")"
[[ $(json 'v[0]["outcome"]' <"$tmp/reqs.json") == answered ]] || fail "fake: $(cat "$tmp/reqs.json")"
ok "OpenAI stream from inside the box: the gateway got 'authorization: Bearer <key>', not the box's fields"

# --- Anthropic wire, streamed ---
script '[{"wire":"anthropic","chunks":["hello ","box"],
  "usage":{"input_tokens":50,"output_tokens":2,"cache_read_tokens":30}}]' "$key"
rsh "$door_curl"' -H "anthropic-version: 2023-06-01" http://door/v1/messages --data-binary @-' \
  <<<"$anthropic_req" >"$tmp/anthropic.sse" || fail "curl in the box: $(cat "$tmp/anthropic.sse")"
grep -q '"text":"hello "' "$tmp/anthropic.sse" || fail "no stream: $(cat "$tmp/anthropic.sse")"
grep -q '^event: message_stop' "$tmp/anthropic.sse" || fail "no message_stop: $(cat "$tmp/anthropic.sse")"
requests >"$tmp/reqs.json"
[[ $(json 'v[0]["headers"]["x-api-key"]' <"$tmp/reqs.json") == "$key" ]] || fail "x-api-key not the user's key"
[[ $(json '"authorization" in v[0]["headers"]' <"$tmp/reqs.json") == False ]] ||
  fail "the box's authorization got through"
ok "Anthropic stream from inside the box: the gateway got 'x-api-key: <key>' only"

# --- a stream reaches the box while the gateway still sends ---
script '[{"wire":"openai","chunks":["early ","bird","late"],"hold_after":3}]' "$key"
# The binary itself in the background (not the rsh function's subshell), so $! is rsh.
"$bin" rsh --box main "$door_curl"' http://door/v1/chat/completions --data-binary @-' \
  <<<"$openai_req" >"$tmp/held.sse" 2>&1 &
held=$!
for _ in $(seq 1 400); do grep -q '"content":"bird"' "$tmp/held.sse" 2>/dev/null && break; sleep 0.05; done
grep -q '"content":"bird"' "$tmp/held.sse" || fail "no early events: $(cat "$tmp/held.sse")"
requests >"$tmp/reqs.json"
[[ $(json 'v[0]["outcome"], v[0]["client_closed"]' <"$tmp/reqs.json") == "('held', False)" ]] ||
  fail "the gateway was not still holding the stream: $(json 'v[0]["outcome"]' <"$tmp/reqs.json")"
kill "$held" 2>/dev/null || true
wait "$held" 2>/dev/null || true
for _ in $(seq 1 400); do
  [[ $(requests | json 'v[0]["client_closed"]') == True ]] && break
  sleep 0.05
done
[[ $(requests | json 'v[0]["client_closed"]') == True ]] || fail "the gateway's stream was not closed"
ok "events reach the box while the gateway holds the stream; the call ends at the gateway when the box leaves"

# --- usage per user and box ---
admin usage --json >"$tmp/usage.json" || fail "api usage"
read -r oa_in oa_out oa_n < <(json '" ".join(str(r[k]) for r in v if r["wire"] == "openai" for k in ("input_tokens", "output_tokens", "requests"))' <"$tmp/usage.json")
[[ "$oa_in $oa_out $oa_n" == "21 3 2" ]] || fail "openai usage: $(cat "$tmp/usage.json")"
read -r an_in an_out an_cr an_user an_box an_model < <(json '" ".join(str(r[k]) for r in v if r["wire"] == "anthropic" for k in ("input_tokens", "output_tokens", "cache_read_tokens", "user", "box_id", "model"))' <"$tmp/usage.json")
[[ "$an_in $an_out $an_cr $an_user $an_box $an_model" == "50 2 30 admin $box_id claude-e2e" ]] ||
  fail "anthropic usage: $(cat "$tmp/usage.json")"
[[ $(json 'sum(r["failed"] for r in v)' <"$tmp/usage.json") == 1 ]] || fail "the cut call is not counted as failed"
admin usage | grep -q '^total' || fail "api usage table"
curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/metrics"
grep -qx 'cocoonbox_model_tokens_total{kind="input"} 71' "$tmp/metrics" ||
  fail "metrics: $(grep cocoonbox_model "$tmp/metrics")"
grep -qx 'cocoonbox_model_door_open 1' "$tmp/metrics" || fail "metrics: door not open"
ok "usage recorded per user and box ($an_in+$oa_in input tokens; the held call failed) and in /metrics"

# --- other routes never reach the gateway ---
code=$(rsh 'curl -s -o /dev/null -w "%{http_code}" --unix-socket /run/cocoonbox/model.sock -X POST http://door/v1/keys -d "{}"' </dev/null)
[[ $code == 404 ]] || fail "POST /v1/keys answered $code"
[[ $(requests | json 'len(v)') == 1 ]] || fail "a refused route reached the gateway"
ok "routes other than the model calls are refused (404) and never reach the gateway"

# --- no gateway: 503 in the wire's shape; the default gateway applies ---
admin user set-gateway admin --clear >/dev/null || fail "set-gateway --clear"
rsh "$door_curl"' -w "\n%{http_code}" http://door/v1/chat/completions --data-binary @-' <<<"$openai_req" >"$tmp/503.out" || true
[[ $(tail -1 "$tmp/503.out") == 503 ]] || fail "no gateway: $(cat "$tmp/503.out")"
head -1 "$tmp/503.out" | json 'v["error"]["code"]' | grep -qx model_gateway_unavailable ||
  fail "503 body: $(cat "$tmp/503.out")"
rsh "$door_curl"' -w "\n%{http_code}" -H "anthropic-version: 2023-06-01" http://door/v1/messages --data-binary @-' \
  <<<"$anthropic_req" >"$tmp/503a.out" || true
[[ $(tail -1 "$tmp/503a.out") == 503 && $(head -1 "$tmp/503a.out" | json 'v["type"]') == error ]] ||
  fail "no gateway (anthropic): $(cat "$tmp/503a.out")"
ok "without a gateway the door answers 503 in each wire's error shape"

printf '%s\n' "$default_key" >"$tmp/default.key"
chmod 644 "$tmp/default.key"
kill_api
set +e
"$bin" api --data-dir "$data" --listen "127.0.0.1:$port" --gateway-url "$gw" \
  --gateway-key-file "$tmp/default.key" >"$tmp/out2" 2>&1
rc=$?
set -e
[[ $rc == 2 ]] && grep -q 'chmod 600' "$tmp/out2" || fail "a group-readable default key file: exit $rc $(cat "$tmp/out2")"
chmod 600 "$tmp/default.key"
# The box kept running while the api was down; the restarted api opens its door again.
start_api --gateway-url "$gw" --gateway-key-file "$tmp/default.key"
script '[{"wire":"openai","text":"from the default","stream":false}]' "$default_key"
rsh "$door_curl"' http://door/v1/chat/completions --data-binary @-' \
  <<<'{"model":"gpt-e2e","messages":[{"role":"user","content":"hi"}]}' >"$tmp/default.json" ||
  fail "default gateway call"
[[ $(json 'v["choices"][0]["message"]["content"]' <"$tmp/default.json") == "from the default" ]] ||
  fail "default gateway: $(cat "$tmp/default.json")"
[[ $(requests | json 'v[0]["headers"]["authorization"]') == "Bearer $default_key" ]] ||
  fail "the default key was not used"
ok "after an api restart the running box's door is open again; the default gateway (0600 key file) applies"

# Back to the user's own gateway for the last call, so its key was the last one used; across
# a hibernate and a wake, which keep the same door socket.
printf '%s' "$key" | admin user set-gateway admin --url "$gw" --key-file - >/dev/null
opened=$(grep -c '"model door open"' "$tmp/err")
"$bin" hibernate >/dev/null 2>&1 || fail "hibernate"
[[ $("$bin" status --json | json 'v["state"]') == hibernated ]] || fail "not hibernated"
script '[{"wire":"anthropic","text":"last","stream":false}]' "$key"
rsh "$door_curl"' -H "anthropic-version: 2023-06-01" http://door/v1/messages --data-binary @-' \
  <<<'{"model":"claude-e2e","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}' >"$tmp/last.json"
[[ $(json 'v["content"][0]["text"]' <"$tmp/last.json") == last ]] || fail "last call: $(cat "$tmp/last.json")"
[[ $(grep -c '"model door open"' "$tmp/err") == "$opened" ]] || fail "the wake replaced the door socket"
ok "after hibernate and wake the same door serves the box, with the user's own gateway again"

# --- the key is nowhere in the box ---
# The search would find it: it is in what the fake gateway recorded.
requests | grep -qF "$key" || fail "the search string is wrong"
[[ -f $box_dir/agent/agent.db ]] || fail "no agent.db in $box_dir/agent"
if grep -rlaF -e "$key" -e "$default_key" "$box_dir" >"$tmp/found" 2>/dev/null; then
  fail "a gateway key is in the box's data dir: $(cat "$tmp/found")"
fi
# Every process of the box: the init and all its descendants, with a command of the user's
# running too (rsh's shell and its sleep).
"$bin" rsh --box main 'sleep 60' </dev/null &
sleeper=$!
for _ in $(seq 1 100); do pgrep -f '^sleep 60$' >/dev/null && break; sleep 0.05; done
init=$(machine_pid "$box_id")
"$py" - "$init" >"$tmp/pids" <<'EOF'
import os, sys
root = int(sys.argv[1])
parent = {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            stat = open(f"/proc/{d}/stat").read()
            parent[int(d)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except OSError:
            pass
def in_box(p):
    while p > 1:
        if p == root:
            return True
        p = parent.get(p, 0)
    return False
print("\n".join(str(p) for p in parent if in_box(p)))
EOF
n=$(wc -l <"$tmp/pids")
((n >= 2)) || fail "found only $n processes of the box"
while read -r pid; do
  for f in environ cmdline; do
    if grep -qaF -e "$key" -e "$default_key" "/proc/$pid/$f" 2>/dev/null; then
      fail "a gateway key is in /proc/$pid/$f ($(tr '\0' ' ' <"/proc/$pid/cmdline"))"
    fi
  done
done <"$tmp/pids"
kill "$sleeper" 2>/dev/null || true
wait "$sleeper" 2>/dev/null || true
# Nor in api.db as plaintext: it is sealed there.
if grep -qaF "$key" "$data"/api.db*; then fail "the key is in api.db in plaintext"; fi
ok "the key is in no file of the box's data dir, no environment or argv of its $n processes, and not in plaintext in api.db"

echo "api_model_door: $passed passed"
