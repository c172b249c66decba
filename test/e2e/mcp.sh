#!/usr/bin/env bash
# MCP end to end (seed §13.2, §13.3, §19): the MCP TypeScript SDK's Client (mcp_client.js) over
# Streamable HTTP against a real api: the box MCP through the edge (/cocoonbox.mcp/<box>, the
# six box tools working in the box as its desktop user), and the control MCP
# (/cocoonbox.mcp/control: status, list, ensure and hibernate with progress, upgrade and delete
# refused without confirm, create and delete), each user seeing only their own boxes.
# Usage: mcp.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
command -v node >/dev/null || fail "node is not installed (run scripts/setup)"

# run_steps URL TOKEN STEPS_JSON: prints the client's JSON array of results.
run_steps() {
  local url=$1 token=$2 steps=$3 f
  f=$(mktemp "$tmp/steps.XXXXXX")
  printf '%s' "$steps" >"$f"
  COCOONBOX_TOKEN=$token node "$here/mcp_client.js" --http "$url" "$f" 2>>"$tmp/client.err" ||
    fail "mcp_client failed: $(tail -5 "$tmp/client.err")"
}
# check REPLY PYTHON_EXPR MESSAGE: r is the list of step results.
check() {
  /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if eval(sys.argv[2]) else 1)' \
    "$1" "$2" || fail "$3: $1"
}

start_api
"$bin" api --data-dir "$data" user add alice --max-boxes 3 --max-running 2 >/dev/null
alice=$("$bin" api --data-dir "$data" token issue alice 2>/dev/null)
"$bin" api --data-dir "$data" user add bob >/dev/null
bob=$("$bin" api --data-dir "$data" token issue bob 2>/dev/null)
sleep 1.2 # a running api picks up admin changes within a second
base=http://127.0.0.1:$port/cocoonbox.mcp
export XDG_CONFIG_HOME=$tmp/config
echo "$alice" | "$bin" login --endpoint "http://127.0.0.1:$port" --token - >/dev/null
"$bin" ensure >/dev/null 2>&1 || fail "ensure alice's main"
box_id=$("$bin" status --json | json 'v["id"]')

# --- the box MCP through the edge ---
r=$(run_steps "$base/main" "$alice" '[
 {"op":"info"}, {"op":"list"},
 {"op":"call","name":"shell","arguments":{"command":"uname -n; pwd; echo err >&2; exit 3"}},
 {"op":"call","name":"write_file","arguments":{"path":"notes/a.txt","content":"alpha\nbeta\n"}},
 {"op":"call","name":"edit_file","arguments":{"path":"notes/a.txt","old_string":"beta","new_string":"gamma"}},
 {"op":"call","name":"read_file","arguments":{"path":"/workspace/notes/a.txt"}},
 {"op":"call","name":"list_dir","arguments":{"path":"notes"}},
 {"op":"call","name":"grep","arguments":{"pattern":"gam+a","path":"notes"}},
 {"op":"call","name":"shell","arguments":{}},
 {"op":"call","name":"no_such_tool","arguments":{}},
 {"op":"call","name":"read_file","arguments":{"path":"missing.txt"}}
]')
check "$r" 'r[0]["server"]["name"] == "cocoonbox-box" and r[0]["version"] == "2025-11-25"' "box MCP initialize"
check "$r" 'r[1]["tools"] == ["shell","read_file","write_file","edit_file","list_dir","grep"]' "box tools/list"
check "$r" 'r[2]["result"]["content"][0]["text"] == "'"$box_id"'\n/workspace\n[stderr]\nerr\n[exit code 3]" and r[2]["result"]["structuredContent"]["exit_code"] == 3' "shell in the box"
check "$r" 'not r[3]["result"].get("isError") and not r[4]["result"].get("isError")' "write_file, edit_file"
check "$r" 'r[5]["result"]["content"][0]["text"] == "     1\talpha\n     2\tgamma\n"' "read_file after the edit"
check "$r" 'r[6]["result"]["content"][0]["text"] == "a.txt  12 B"' "list_dir"
check "$r" 'r[7]["result"]["content"][0]["text"] == "/workspace/notes/a.txt:2:gamma"' "grep"
check "$r" 'r[8]["result"]["isError"] and "missing required field \"command\"" in r[8]["result"]["content"][0]["text"]' "bad arguments are a tool error naming the field"
check "$r" 'r[9]["error"]["code"] == -32602 and "no_such_tool" in r[9]["error"]["message"]' "unknown tool"
check "$r" 'r[10]["result"]["isError"] and "No such file" in r[10]["result"]["content"][0]["text"]' "missing file"
owner=$("$bin" rsh stat -c %U /workspace/notes/a.txt) || fail "rsh stat"
who=$("$bin" rsh id -un)
[[ $owner == "$who" ]] || fail "write_file made a file of $owner, not the desktop user $who"
ok "box MCP through the edge: the SDK lists the six tools and runs each in the box as $who"

# --- the control MCP ---
r=$(run_steps "$base/control" "$alice" '[
 {"op":"info"}, {"op":"list"},
 {"op":"call","name":"box_status","arguments":{}},
 {"op":"call","name":"box_hibernate","arguments":{"box":"main"}},
 {"op":"call","name":"box_status","arguments":{"box":"main"}},
 {"op":"call","name":"box_ensure","arguments":{}},
 {"op":"call","name":"box_upgrade","arguments":{"confirm":false}},
 {"op":"call","name":"box_list","arguments":{}},
 {"op":"call","name":"box_status","arguments":{"box":"nope"}},
 {"op":"call","name":"box_ensure","arguments":{"wait":"yes"}}
]')
check "$r" 'r[0]["server"]["name"] == "cocoonbox-control"' "control MCP initialize"
check "$r" 'r[1]["tools"] == ["box_status","box_list","box_ensure","box_hibernate","box_upgrade","box_create","box_delete"]' "control tools/list"
check "$r" 'r[2]["result"]["structuredContent"]["state"] == "running" and r[2]["result"]["structuredContent"]["id"] == "'"$box_id"'"' "box_status"
check "$r" 'not r[3]["result"].get("isError") and any("hibernating box main: freezing" in p for p in r[3]["progress"])' "box_hibernate with progress"
check "$r" 'r[4]["result"]["structuredContent"]["state"] == "hibernated"' "hibernated after box_hibernate"
check "$r" 'r[5]["result"]["structuredContent"]["state"] == "running" and any(p.startswith("waking box main: thawing") for p in r[5]["progress"])' "box_ensure wakes with progress"
check "$r" 'r[6]["result"]["isError"] and "running programs restart; files, logins and agent history are kept" in r[6]["result"]["content"][0]["text"]' "box_upgrade refused without confirm"
check "$r" '[b["name"] for b in r[7]["result"]["structuredContent"]["boxes"]] == ["main"]' "box_list"
check "$r" 'r[8]["result"]["isError"] and "not found" in r[8]["result"]["content"][0]["text"]' "unknown box"
check "$r" 'r[9]["result"]["isError"] and "arguments.wait" in r[9]["result"]["content"][0]["text"]' "bad argument type"
ok "control MCP: status, list, hibernate and ensure with progress, upgrade refused without confirm"

r=$(run_steps "$base/control" "$alice" '[
 {"op":"call","name":"box_upgrade","arguments":{"confirm":true}},
 {"op":"call","name":"box_create","arguments":{"name":"second"}},
 {"op":"call","name":"box_create","arguments":{"name":"second"}},
 {"op":"call","name":"box_delete","arguments":{"box":"second","confirm":false}},
 {"op":"call","name":"box_delete","arguments":{"box":"second","confirm":true}},
 {"op":"call","name":"box_list","arguments":{}}
]')
check "$r" 'not r[0]["result"].get("isError") and r[0]["result"]["structuredContent"]["state"] == "running" and r[0]["progress"]' "box_upgrade with confirm"
check "$r" 'r[1]["result"]["structuredContent"]["state"] == "running" and r[1]["result"]["structuredContent"]["name"] == "second"' "box_create"
check "$r" 'r[2]["result"]["isError"] and "already exists" in r[2]["result"]["content"][0]["text"]' "box_create twice"
check "$r" 'r[3]["result"]["isError"] and "confirm: true" in r[3]["result"]["content"][0]["text"]' "box_delete refused without confirm"
check "$r" 'not r[4]["result"].get("isError")' "box_delete"
check "$r" '[b["name"] for b in r[5]["result"]["structuredContent"]["boxes"]] == ["main"]' "list after delete"
# The upgrade kept the box's files.
[[ $("$bin" rsh cat /workspace/notes/a.txt) == $'alpha\ngamma' ]] || fail "upgrade lost /workspace"
ok "control MCP: upgrade with confirm keeps files; create, create twice, delete with and without confirm"

# --- only one's own boxes ---
r=$(run_steps "$base/control" "$bob" '[
 {"op":"call","name":"box_list","arguments":{}},
 {"op":"call","name":"box_status","arguments":{"box":"'"$box_id"'"}},
 {"op":"call","name":"box_hibernate","arguments":{"box":"'"$box_id"'"}}
]')
check "$r" 'r[0]["result"]["structuredContent"]["boxes"] == []' "bob sees no boxes"
check "$r" 'r[1]["result"]["isError"] and r[2]["result"]["isError"]' "bob cannot touch alice's box"
[[ $("$bin" status --json | json 'v["state"]') == running ]] || fail "alice's box changed state"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' -X POST "$base/$box_id" \
  -H "authorization: Bearer $bob" -H 'content-type: application/json' \
  -H 'accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}')
[[ $code == 404 ]] || fail "bob's request to alice's box MCP: HTTP $code $(cat "$tmp/body")"
for path in control main; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/$path" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' -d '{}')
  [[ $code == 401 ]] || fail "no token on $path: HTTP $code"
done
ok "another user's box is not found on both MCPs; no token is 401"
# Streamable HTTP rules through the api, on both endpoints (src/mcp/README.md).
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
for path in control main; do
  h=(-H "authorization: Bearer $alice" -H 'content-type: application/json')
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/$path" "${h[@]}" -H 'accept: text/html' -d "$init")
  [[ $code == 406 ]] || fail "$path: a POST that accepts neither JSON nor SSE got $code, want 406"
  h+=(-H 'accept: application/json, text/event-stream')
  sid=$(curl -s -D - -o /dev/null -X POST "$base/$path" "${h[@]}" -d "$init" | tr -d '\r' |
    sed -n 's/^mcp-session-id: //Ip')
  [[ -n $sid ]] || fail "$path: initialize gave no Mcp-Session-Id"
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/$path" "${h[@]}" -H "mcp-session-id: $sid" \
    -H 'mcp-protocol-version: 1999-01-01' -d '{"jsonrpc":"2.0","id":2,"method":"ping"}')
  [[ $code == 400 ]] || fail "$path: an unknown MCP-Protocol-Version got $code, want 400"
  code=$(curl -s -o "$tmp/body" -w '%{http_code}' -X POST "$base/$path" "${h[@]}" -H "mcp-session-id: $sid" \
    -H 'mcp-protocol-version: 2025-06-18' -d '{"jsonrpc":"2.0","id":3,"method":"ping"}')
  [[ $code == 200 ]] || fail "$path: ping in the session got $code: $(cat "$tmp/body")"
  code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$base/$path" "${h[@]}" -H "mcp-session-id: $sid")
  [[ $code == 200 || $code == 204 ]] || fail "$path: DELETE got $code"
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/$path" "${h[@]}" -H "mcp-session-id: $sid" \
    -H 'mcp-protocol-version: 2025-06-18' -d '{"jsonrpc":"2.0","id":4,"method":"ping"}')
  [[ $code == 404 ]] || fail "$path: the session after DELETE got $code, want 404"
done
ok "Streamable HTTP through the api: session ids, 406 on Accept, 400 on a bad version, 404 after DELETE"

# --- the stdio bridge, `cocoonbox mcp` (seed §13.2, §19.2) ---
# run_bridge STEPS_JSON [BRIDGE FLAGS...]: the SDK's stdio client starts `cocoonbox mcp`.
export XDG_CACHE_HOME=$tmp/cache
run_bridge() {
  local steps=$1 f
  shift
  f=$(mktemp "$tmp/steps.XXXXXX")
  printf '%s' "$steps" >"$f"
  node "$here/mcp_client.js" --stdio "$f" -- "$bin" mcp "$@" 2>>"$tmp/bridge.err" ||
    fail "bridge client failed: $(tail -5 "$tmp/bridge.err")"
}
state() { "$bin" status --box "${1:-main}" --json | json 'v["state"]'; }
"$bin" hibernate >/dev/null 2>&1 || fail "hibernate main"
r=$(run_bridge '[{"op":"info"}, {"op":"list"}]')
check "$r" 'r[0]["server"]["name"] == "cocoonbox"' "bridge initialize"
check "$r" 'r[1]["tools"][:7] == ["box_status","box_list","box_ensure","box_hibernate","box_upgrade","box_create","box_delete"] and r[1]["tools"][7:] == ["shell","read_file","write_file","edit_file","list_dir","grep"]' "bridge tools/list"
[[ $(state) == hibernated ]] || fail "initialize and tools/list woke the box: $(state)"
ok "bridge: initialize and tools/list answer without waking the hibernated box"

r=$(run_bridge '[{"op":"call","name":"shell","arguments":{"command":"uname -n"}}]' --no-wake)
check "$r" 'r[0]["result"]["isError"] and "call box_ensure" in r[0]["result"]["content"][0]["text"]' "--no-wake"
[[ $(state) == hibernated ]] || fail "--no-wake woke the box"
ok "bridge --no-wake: a box tool on a hibernated box fails telling the model to call box_ensure"

"$bin" box create other >/dev/null 2>&1 || fail "box create other"
other_id=$("$bin" status --box other --json | json 'v["id"]')
r=$(run_bridge '[
 {"op":"call","name":"shell","arguments":{"command":"uname -n"}},
 {"op":"call","name":"shell","arguments":{"command":"uname -n","box":"other"}},
 {"op":"call","name":"shell","arguments":{"command":"uname -n","box":"'"$other_id"'"}},
 {"op":"call","name":"read_file","arguments":{"box":"main"}},
 {"op":"call","name":"nope","arguments":{}},
 {"op":"call","name":"box_status","arguments":{"box":"main"}}
]')
check "$r" 'r[0]["result"]["content"][0]["text"] == "'"$box_id"'\n[exit code 0]" and any(p.startswith("waking box main") for p in r[0]["progress"])' "bridge wakes the box with progress and runs the tool"
check "$r" 'r[1]["result"]["content"][0]["text"] == "'"$other_id"'\n[exit code 0]" and r[2]["result"]["content"] == r[1]["result"]["content"]' "box by name and by id"
check "$r" 'r[3]["result"]["isError"] and "missing required field \"path\"" in r[3]["result"]["content"][0]["text"]' "bad arguments through the bridge"
check "$r" 'r[4]["error"]["code"] == -32602' "unknown tool through the bridge"
check "$r" 'r[5]["result"]["structuredContent"]["state"] == "running"' "control tool through the bridge"
python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); assert [x["name"] for x in t] == ["shell","read_file","write_file","edit_file","list_dir","grep"]' \
  "$XDG_CACHE_HOME/cocoonbox/tools.json" || fail "the bridge did not cache the box's tools"
ok "bridge: the first box tool call wakes the box (progress), box routes by name or id, tools cached"

# A cached list that differs from the box's live one: the bridge serves the cache at once,
# then tells the client the list changed once it saw the live list (the box is running).
/usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; t=json.load(open(p)); json.dump(t[:4], open(p, "w"))' \
  "$XDG_CACHE_HOME/cocoonbox/tools.json"
r=$(run_bridge '[{"op":"wait_list_changed","ms":30000}, {"op":"list"}]')
check "$r" 'r[0]["count"] >= 1 and len(r[1]["tools"]) == 13' "list_changed after a stale cache"
python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1]))) == 6' "$XDG_CACHE_HOME/cocoonbox/tools.json" ||
  fail "the bridge did not rewrite the stale cache"
ok "bridge: a stale cached list is replaced by the live one, with notifications/tools/list_changed"

bob_box=$(COCOONBOX_TOKEN=$bob node "$here/boxes_js_client.js" --port "$port" ensure --name main | json 'v["id"]') ||
  fail "bob's box"
r=$(run_bridge '[{"op":"call","name":"shell","arguments":{"command":"id","box":"'"$bob_box"'"}}]')
check "$r" 'r[0]["result"]["isError"] and "not found" in r[0]["result"]["content"][0]["text"]' "another user's box through the bridge"
ok "bridge: another user's box is refused"

# The api goes away: the bridge keeps answering; calls fail clearly, then work once it is back.
kill_api
r=$(run_bridge '[{"op":"list"}, {"op":"call","name":"box_status","arguments":{}}]')
check "$r" 'len(r[0]["tools"]) == 13 and r[1]["result"]["isError"] and "cannot reach the api" in r[1]["result"]["content"][0]["text"]' "bridge with the api down"
f=$(mktemp "$tmp/steps.XXXXXX")
printf '%s' '[{"op":"call","name":"box_status","arguments":{}}, {"op":"call_until","name":"box_status","arguments":{},"tries":60,"ms":500}]' >"$f"
node "$here/mcp_client.js" --stdio "$f" -- "$bin" mcp >"$tmp/bridge.out" 2>>"$tmp/bridge.err" &
bridge_client=$!
sleep 1
start_api
wait "$bridge_client" || fail "bridge client across the restart: $(tail -5 "$tmp/bridge.err")"
r=$(cat "$tmp/bridge.out")
check "$r" 'r[0]["result"]["isError"] and not r[1]["result"].get("isError") and r[1]["result"]["structuredContent"]["state"] == "running"' "bridge after the api came back"
ok "bridge: with the api down tools/list still answers and calls fail clearly; it reconnects"
! grep -qF "$alice" "$tmp/bridge.err" || fail "the token is in the bridge's stderr"

# Claude Code itself (npm @anthropic-ai/claude-code, pinned in test/interop; no login needed)
# reads the entry `cocoonbox setup claude` wrote and starts the bridge: `claude mcp list`
# reports it connected. In a network namespace of its own when we can make one, so the
# client cannot reach anything but its child.
claude=$here/../interop/node_modules/.bin/claude
[[ -x $claude ]] || fail "Claude Code is not installed: run scripts/setup (npm ci in test/interop)"
claude_home=$tmp/claude-home
mkdir -p "$claude_home"
HOME=$claude_home "$bin" setup claude >/dev/null || fail "setup claude"
isolate=()
if [[ $(id -u) == 0 ]] && unshare -n true 2>/dev/null; then isolate=(unshare -n); fi
listed=$(HOME=$claude_home DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
  DISABLE_TELEMETRY=1 timeout 120 "${isolate[@]}" "$claude" mcp list 2>&1) ||
  fail "claude mcp list: $listed"
grep -q "^cocoonbox: .* mcp - ✔ Connected" <<<"$listed" || fail "claude mcp list: $listed"
! grep -rqF "$alice" "$claude_home" || fail "the token is in Claude Code's files"
ok "Claude Code $(HOME=$claude_home "${isolate[@]}" "$claude" --version 2>/dev/null | head -1) lists the bridge as connected"
echo "$passed passed, 0 failed"
