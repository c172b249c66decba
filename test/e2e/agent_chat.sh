#!/usr/bin/env bash
# `cocoonbox chat` and `cocoonbox agents` end to end (issue 6 item 6): a real api with the local
# backend, a box whose agent calls the fake model gateway (test/support/fake_gateway.py) through
# the model door, and the CLI on the user's side. Scripted turns: a text turn printed as it
# streams; a tool call (the box's shell) -> result -> final answer; --json lines parsed by
# python; `agents --json` lists the agent and its last turn; a chat killed mid-turn and
# `chat --agent ID` following the rest of that turn; an api restart mid-turn that the chat
# rides out by resuming Session.Events from its last offset_key.
# Usage: agent_chat.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
py=/usr/bin/python3
admin() { "$bin" api --data-dir "$data" "$@"; }

"$py" "$here/../support/fake_gateway.py" >"$tmp/gw.out" 2>"$tmp/gw.err" &
for _ in $(seq 1 200); do [[ -s $tmp/gw.out ]] && break; sleep 0.05; done
gw_port=$(head -1 "$tmp/gw.out")
[[ $gw_port =~ ^[0-9]+$ ]] || fail "the fake gateway did not start: $(cat "$tmp/gw.err")"
gw="http://127.0.0.1:$gw_port"
key="sk-e2e-chat-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
script() {
  curl -sf -X POST -H 'content-type: application/json' "$gw/_fake/script" \
    --data "{\"key\": \"$key\", \"turns\": $1}" >/dev/null || fail "script the fake gateway"
}
# Waits until FILE contains TEXT (a fixed string).
wait_for() {
  for _ in $(seq 1 600); do grep -qF -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  fail "no '$2' in $1: $(cat "$1")"
}

start_api
"$bin" login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
printf '%s\n' "$key" | admin user set-gateway admin --url "$gw" --key-file - >/dev/null ||
  fail "set-gateway"
"$bin" ensure >/dev/null 2>&1 || fail "ensure"
box_id=$("$bin" status --json | json 'v["id"]')
agent_dir=$data/boxes/$box_id/agent
[[ -d $agent_dir ]] || fail "no agent data dir $agent_dir"
# The box's agent learns its model from <agent data dir>/agent.json, read at every turn.
printf '{"models": {"main": {"name": "gpt-e2e", "wire": "openai"}}}\n' >"$agent_dir/agent.json"
chmod 644 "$agent_dir/agent.json"

# --- agents: none yet ---
[[ $("$bin" agents --json) == "[]" ]] || fail "agents before any chat: $("$bin" agents --json)"
"$bin" agents | grep -q "No agents in box main yet" || fail "agents text: $("$bin" agents)"
ok "agents: an empty box says so (text and --json)"

# --- a plain text turn ---
script '[{"wire":"openai","chunks":["Hello ","from ","the box."]}]'
"$bin" chat "say hello" </dev/null >"$tmp/t1.out" 2>"$tmp/t1.err" ||
  fail "chat exit $?: $(cat "$tmp/t1.out" "$tmp/t1.err")"
[[ $(head -1 "$tmp/t1.out") == "Hello from the box." ]] || fail "text turn: $(cat "$tmp/t1.out")"
[[ $(tail -1 "$tmp/t1.out") == "· done" ]] || fail "end state: $(cat "$tmp/t1.out")"
[[ $(curl -sf "$gw/_fake/requests" | json 'v["requests"][0]["body"]["messages"][-1]["content"]') == "say hello" ]] ||
  fail "the gateway did not get the prompt"
"$bin" agents --json >"$tmp/agents.json"
[[ $(json 'len(v)' <"$tmp/agents.json") == 1 ]] || fail "agents: $(cat "$tmp/agents.json")"
agent=$(json 'v[0]["id"]' <"$tmp/agents.json")
[[ $(json 'v[0]["last_turn"]["state"], v[0]["model"]' <"$tmp/agents.json") == "('done', 'gpt-e2e')" ]] ||
  fail "agents: $(cat "$tmp/agents.json")"
"$bin" agents | grep -q "^$agent .* done" || fail "agents table: $("$bin" agents)"
ok "chat PROMPT creates an agent and prints the streamed text and the end state; agents lists it ($agent)"

# --- a tool call, its result, the final answer ---
script '[{"wire":"openai","tool_calls":[{"id":"call_1","name":"shell","arguments":{"command":"echo tool-output-42; echo second line"}}]},
         {"wire":"openai","text":"The command printed tool-output-42."}]'
"$bin" chat "run it" </dev/null >"$tmp/t2.out" 2>"$tmp/t2.err" ||
  fail "chat exit $?: $(cat "$tmp/t2.out" "$tmp/t2.err")"
cat >"$tmp/t2.want" <<'EOF'
▸ shell: echo tool-output-42; echo second line
  ⎿ tool-output-42
The command printed tool-output-42.
· done
EOF
diff "$tmp/t2.want" "$tmp/t2.out" >&2 || fail "tool turn output differs: $(cat "$tmp/t2.out" "$tmp/t2.err"; curl -s "$gw/_fake/requests")"
[[ $(curl -sf "$gw/_fake/requests" | json 'v["requests"][1]["body"]["messages"][-1]["role"]') == tool ]] ||
  fail "the second model call did not carry the tool result"
ok "a tool call is one line (▸ shell: ...), its result's first line under it, then the answer"

# --- --json: one object per line ---
script '[{"wire":"openai","chunks":["json ","turn"]}]'
"$bin" chat --agent "$agent" --json "in json" </dev/null >"$tmp/t3.out" 2>"$tmp/t3.err" ||
  fail "chat --json exit $?: $(cat "$tmp/t3.out" "$tmp/t3.err")"
"$py" - "$tmp/t3.out" "$agent" <<'EOF' || fail "--json output: $(cat "$tmp/t3.out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
types = [l["type"] for l in lines]
assert types[0] == "agent" and lines[0]["agent"]["id"] == sys.argv[2], types
assert types[1] == "sent", types
turn = lines[1]["turn_id"]
assert types[-1] == "turn" and lines[-1]["state"] == "done" and lines[-1]["turn_id"] == turn, lines[-1]
items = [l for l in lines if l["type"] == "item"]
assert [(i["role"], i["kind"]) for i in items] == [("user", "text"), ("assistant", "text")], items
assert items[0]["payload"]["text"] == "in json" and items[1]["payload"]["text"] == "json turn", items
assert all(i["turn_id"] == turn and i["offset_key"] for i in items), items
deltas = "".join(l["text"] for l in lines if l["type"] == "delta")
assert deltas in ("", "json turn"), deltas
EOF
ok "--json prints agent, sent, items (with offset keys), deltas and the turn's end, one per line"

# --- a chat killed mid-turn; chat --agent shows the rest ---
# The tool waits for a file, so the turn is certainly still running while the chat is killed.
rm -f "$data/boxes/$box_id/workspace/go"
script '[{"wire":"openai","tool_calls":[{"id":"call_w","name":"shell","arguments":{"command":"while [ ! -e /workspace/go ]; do sleep 0.1; done; echo released"}}]},
         {"wire":"openai","text":"Finished after the release."}]'
"$bin" chat --agent "$agent" "wait for go" </dev/null >"$tmp/t4.out" 2>&1 &
chat_pid=$!
wait_for "$tmp/t4.out" "▸ shell: while"
kill -9 "$chat_pid"
wait "$chat_pid" 2>/dev/null || true
"$bin" agents --json | json '[a["last_turn"]["state"] for a in v]' | grep -q running ||
  fail "the turn did not keep running without the chat"
"$bin" chat --agent "$agent" --json </dev/null >"$tmp/t5.out" 2>"$tmp/t5.err" &
chat2=$!
wait_for "$tmp/t5.out" '"type":"agent"'
"$bin" rsh --box main 'touch /workspace/go' </dev/null || fail "rsh touch"
wait "$chat2" || fail "chat --agent exit $?: $(cat "$tmp/t5.out" "$tmp/t5.err")"
"$py" - "$tmp/t5.out" <<'EOF' || fail "resumed chat: $(cat "$tmp/t5.out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines[0]["agent"]["last_turn"]["state"] == "running", lines[0]
items = [l for l in lines if l["type"] == "item"]
kinds = [(i["role"], i["kind"]) for i in items]
# The whole turn, from its prompt: nothing lost, nothing twice.
assert kinds == [("user", "text"), ("assistant", "tool_call"), ("tool", "tool_result"),
                 ("assistant", "text")], kinds
assert "released" in items[2]["payload"]["content"][0]["text"], items[2]
assert items[3]["payload"]["text"] == "Finished after the release.", items[3]
assert lines[-1]["type"] == "turn" and lines[-1]["state"] == "done", lines[-1]
EOF
ok "a chat killed mid-turn: chat --agent follows the running turn to its end"

# --- the api restarts mid-turn: the chat resumes Events from its last offset_key ---
rm -f "$data/boxes/$box_id/workspace/go"
script '[{"wire":"openai","tool_calls":[{"id":"call_r","name":"shell","arguments":{"command":"while [ ! -e /workspace/go ]; do sleep 0.1; done; echo resumed-ok"}}]},
         {"wire":"openai","text":"Done across the restart."}]'
"$bin" chat --agent "$agent" "survive a restart" </dev/null >"$tmp/t6.out" 2>"$tmp/t6.err" &
chat3=$!
wait_for "$tmp/t6.out" "▸ shell: while"
kill_api
start_api
"$bin" rsh --box main 'touch /workspace/go' </dev/null || fail "rsh touch after restart"
wait "$chat3" || fail "chat across a restart exit $?: $(cat "$tmp/t6.out" "$tmp/t6.err")"
cat >"$tmp/t6.want" <<'EOF'
▸ shell: while [ ! -e /workspace/go ]; do sleep 0.1; done; echo resumed-ok
  ⎿ resumed-ok
Done across the restart.
· done
EOF
diff "$tmp/t6.want" "$tmp/t6.out" >&2 || fail "resumed output differs"
grep -q "resuming" "$tmp/t6.err" || fail "no resume note: $(cat "$tmp/t6.err")"
ok "an api restart mid-turn: the chat resumed the events stream and printed each item once"

# --- approvals: asked inline on the terminal, answered with Respond ---
printf '{"models": {"main": {"name": "gpt-e2e", "wire": "openai"}}, "approval_mode": "ask"}\n' \
  >"$agent_dir/agent.json"
script '[{"wire":"openai","tool_calls":[{"id":"call_a","name":"shell","arguments":{"command":"echo approved-run"}}]},
         {"wire":"openai","text":"It ran."}]'
# chat on a terminal of its own: the question appears there and "y" is typed.
"$py" - "$bin" >"$tmp/t7.out" 2>&1 <<'EOF2' || fail "approval chat: $(cat "$tmp/t7.out")"
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "chat", "--new", "remove it"])
out, answered, deadline = b"", False, time.time() + 60
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    if not answered and b"[a]lways / [n]o" in out:
        os.write(fd, b"y\n")
        answered = True
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
sys.exit(os.waitstatus_to_exitcode(status))
EOF2
grep -q "Allow shell: echo approved-run? \[y\]es once / \[a\]lways / \[n\]o" "$tmp/t7.out" ||
  fail "no question: $(cat "$tmp/t7.out")"
grep -q "approved-run" "$tmp/t7.out" && grep -q "It ran." "$tmp/t7.out" ||
  fail "the approved call did not run: $(cat "$tmp/t7.out")"
ok "approval mode ask: chat asks 'Allow shell: ...? [y]es once / [a]lways / [n]o' and y runs the call"

# --- usage errors ---
set +e
"$bin" chat --agent ag_nope "x" </dev/null >/dev/null 2>"$tmp/e1.err"
rc=$?
set -e
[[ $rc == 1 ]] && grep -q "no agent ag_nope" "$tmp/e1.err" || fail "unknown agent: exit $rc $(cat "$tmp/e1.err")"
ok "an unknown --agent is an error naming it"

echo "agent_chat: $passed passed"
