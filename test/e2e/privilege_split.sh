#!/usr/bin/env bash
# The privilege split of seed §3 on the local backend (roles/api/machines/README.md §Privilege
# split), end to end with a real api and agent, as root: Session.Exec (rsh) and the box MCP's
# shell tool run as the desktop account; agent.db and the agent's data dir are out of their
# reach; what they write in /home/user is the desktop account's on the host; the agent runs as
# another host account, root only of its own user namespace, whose maps name no host root.
# Usage: privilege_split.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
if [[ $(id -u) != 0 ]]; then
  echo "skip: the privilege split needs an api running as root"
  exit 77
fi
command -v node >/dev/null || fail "node is not installed (run scripts/setup)"
export XDG_CONFIG_HOME=$tmp/config
rsh() { "$bin" rsh --box main "$@" </dev/null; }

start_api
"$bin" login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
"$bin" ensure >/dev/null 2>&1 || fail "ensure"
box_id=$("$bin" status --json | json 'v["id"]')
box_dir=$data/boxes/$box_id
grep -q 'tools as cocoonbox-box-desk' "$tmp/err" || fail "the api does not report the split"
desk=cocoonbox-box-desk
desk_uid=$(id -u "$desk") || fail "no desktop account $desk"
agent_uid=$(id -u cocoonbox-box) || fail "no box user"

# --- Session.Exec runs as the desktop account ---
who=$(rsh 'id -u; id -un; echo $HOME')
[[ $who == "$desk_uid"$'\n'"$desk"$'\n'/home/user ]] || fail "Exec's account: $who"
ok "Session.Exec runs as $desk (uid $desk_uid), HOME /home/user"

# --- the agent's data is out of the tools' reach ---
[[ -s $box_dir/agent/agent.db ]] || fail "no agent.db in $box_dir/agent"
set +e
out=$(rsh 'cat /var/lib/cocoonbox-agent/agent.db' 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"Permission denied"* ]] || fail "cat agent.db: $rc $out"
set +e
out=$(rsh 'ls -A /var/lib/cocoonbox-agent' 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"Permission denied"* ]] || fail "ls of the agent's data dir: $rc $out"
ok "cat agent.db and ls of the agent's data dir: Permission denied"

# --- /home/user is the desktop account's ---
rsh 'echo hello > /home/user/f && mkdir -p /home/user/d && echo x > /home/user/d/g' ||
  fail "write /home/user"
for f in f d d/g; do
  [[ $(stat -c %U:%u "$box_dir/home/$f") == "$desk:$desk_uid" ]] ||
    fail "home/$f belongs to $(stat -c %U:%u "$box_dir/home/$f")"
done
[[ $(stat -c %U "$box_dir/home") == "$desk" && $(stat -c %U "$box_dir/workspace") == "$desk" ]] ||
  fail "home or workspace not the desktop account's"
ok "files written in /home/user belong to $desk on the host"

# --- the box MCP's shell tool, as the desktop account ---
printf '%s' '[{"op":"call","name":"shell","arguments":{"command":"id -u; cat /var/lib/cocoonbox-agent/agent.db"}}]' >"$tmp/steps"
r=$(COCOONBOX_TOKEN=$(cat "$data/admin.token") node "$here/mcp_client.js" \
  --http "http://127.0.0.1:$port/cocoonbox.mcp/main" "$tmp/steps" 2>"$tmp/client.err") ||
  fail "mcp_client: $(tail -5 "$tmp/client.err")"
text=$(json 'v[0]["result"]["content"][0]["text"]' <<<"$r")
[[ $text == "$desk_uid"$'\n'* && $text == *"Permission denied"* ]] || fail "shell tool: $text"
ok "the shell tool runs as uid $desk_uid and cannot read agent.db"

# --- the agent: another host account, root only of its own user namespace ---
init=$(machine_pid "$box_id")
agent=$(pgrep -P "$init" | head -1)
[[ -n $agent ]] || fail "no agent under the box init $init"
for pid in "$init" "$agent"; do
  grep -Eq "^Uid:\s+$agent_uid\s+$agent_uid\s+$agent_uid\s+$agent_uid\$" "/proc/$pid/status" ||
    fail "pid $pid: $(grep ^Uid: "/proc/$pid/status")"
done
[[ $agent_uid != "$desk_uid" ]] || fail "agent and tools share uid $agent_uid"
maps=$(awk '{print $1, $2, $3}' "/proc/$agent/uid_map")
[[ $maps == "0 $agent_uid 1"$'\n'"$desk_uid $desk_uid 1" ]] || fail "uid_map: $maps"
[[ $(readlink "/proc/$agent/ns/user") != $(readlink /proc/self/ns/user) ]] ||
  fail "the agent is in the host's user namespace"
# With the agent's credentials (root of its namespace): the host's root-only files stay shut,
# and no unmapped id can be taken.
set +e
out=$(nsenter --target "$agent" --user --setuid 0 --setgid 0 cat /etc/shadow 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"Permission denied"* ]] || fail "the agent's root reads /etc/shadow: $rc"
set +e
nsenter --target "$agent" --user --setuid 0 --setgid 0 \
  setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null
rc=$?
set -e
[[ $rc != 0 ]] || fail "the agent's root became an unmapped uid"
grep -q 'privilege split: tools run as the desktop user' "$box_dir/agent.log" ||
  fail "agent.log does not report the split"
ok "the agent runs as uid $agent_uid, root only of a namespace mapping 0->$agent_uid and $desk_uid->$desk_uid"

echo "privilege_split: $passed passed"
