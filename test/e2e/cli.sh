#!/usr/bin/env bash
# The cocoonbox CLI against a real api, as a user runs it (seed §13.4): login with a token from
# stdin (checked, stored 0600, never in argv), status/ensure/hibernate/upgrade/boxes/box
# create/rm with progress on stderr and --json on stdout, exit codes 0/1/2, a credential helper,
# logout, and shell completion. This is also the README's "first box" walk-through.
# Usage: cli.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
cfg=$XDG_CONFIG_HOME/cocoonbox
cb() { "$bin" "$@" </dev/null; }
# expect CODE CMD...: runs the CLI, captures stdout/stderr in $out/$err, checks the exit code.
expect() {
  local want=$1; shift
  set +e
  out=$("$bin" "$@" 2>"$tmp/stderr" </dev/null); rc=$?
  set -e
  err=$(cat "$tmp/stderr")
  [[ $rc == "$want" ]] || fail "cocoonbox $* exited $rc, want $want; stderr: $err"
}

start_api
endpoint=http://127.0.0.1:$port
# The login line the api prints is the one the user pastes.
login_line=$(grep -o 'cocoonbox login .*' "$tmp/out") || fail "no login line"

"$bin" api --data-dir "$data" user add alice --max-boxes 3 --max-running 1 >/dev/null
alice=$("$bin" api --data-dir "$data" token issue alice 2>/dev/null)
sleep 1.2  # a running api picks up admin changes within a second

# --- login ---
expect 0 --help
grep -q "Commands:" <<<"$out" || fail "--help lists no commands"
expect 0 login --help
grep -q "Examples:" <<<"$out" || fail "login --help has no examples"
expect 2 login --endpoint "http://10.1.2.3:7443" --token -
grep -q "loopback" <<<"$err" || fail "plaintext off loopback: $err"
expect 2 login --endpoint "$endpoint" --token "$alice"
grep -q "argv" <<<"$err" || fail "a token in argv was not refused clearly: $err"
set +e
echo "cbt_not_a_real_token" | "$bin" login --endpoint "$endpoint" --token - >/dev/null 2>"$tmp/stderr"; rc=$?
set -e
[[ $rc == 1 ]] && grep -q "refused the token" "$tmp/stderr" || fail "bad token: rc $rc $(cat "$tmp/stderr")"
[[ ! -e $cfg/token ]] || fail "a refused token was stored"
expect 1 status
grep -q "not logged in" <<<"$err" || fail "status before login: $err"
echo "$alice" | "$bin" login --endpoint "$endpoint" --token - >"$tmp/login" || fail "login"
[[ $(stat -c %a "$cfg") == 700 ]] || fail "config dir mode $(stat -c %a "$cfg")"
[[ $(stat -c %a "$cfg/token") == 600 ]] || fail "token file mode"
[[ $(cat "$cfg/token") == "$alice" ]] || fail "token file content"
! grep -q "$alice" "$cfg/cli.json" || fail "token in cli.json"
[[ $(json 'v["endpoint"]' <"$cfg/cli.json") == "$endpoint" ]] || fail "cli.json endpoint"
ok "login: token from stdin, checked by the api, stored 0600; bad endpoint/token/argv refused"

# --- the first box ---
expect 1 status
grep -q "NOT_FOUND\|not found\|no box" <<<"$err" || fail "status of no box: $err"
expect 0 ensure
grep -q "running" <<<"$out" || fail "ensure stdout: $out"
grep -q "box main: starting: waiting for the agent" <<<"$err" || fail "no progress lines: $err"
expect 0 status --json
[[ $(json 'v["state"]' <<<"$out") == running ]] || fail "status --json: $out"
box_id=$(json 'v["id"]' <<<"$out")
expect 0 boxes --json
[[ $(json 'len(v)' <<<"$out") == 1 && $(json 'v[0]["name"]' <<<"$out") == main ]] || fail "boxes: $out"
ok "ensure: a running box with progress on stderr; status and boxes --json"

# --- hibernate, wake, upgrade ---
expect 0 hibernate
[[ $(cb status --json | json 'v["state"]') == hibernated ]] || fail "not hibernated"
expect 0 ensure --json
[[ $(json 'v["state"]' <<<"$out") == running ]] || fail "wake: $out"
echo "keep me" > "$data/boxes/$box_id/workspace/note.txt"
expect 2 upgrade
grep -q "yes" <<<"$err" || fail "upgrade without a terminal or --yes: $err"
expect 0 upgrade --yes --json
[[ $(json 'v["result"]' <<<"$out") == done ]] || fail "upgrade: $out"
[[ $(cat "$data/boxes/$box_id/workspace/note.txt") == "keep me" ]] || fail "upgrade lost /workspace"
ok "hibernate, wake, upgrade --yes keeps /workspace; upgrade asks first"

# --- several boxes ---
expect 1 box create work
grep -q "max_running" <<<"$err" || fail "over the running quota: $err"
expect 0 hibernate
expect 0 box create work --json
[[ $(json 'v["state"]' <<<"$out") == running ]] || fail "box create: $out"
expect 1 box create work
grep -q "already exists" <<<"$err" || fail "box create twice: $err"
expect 1 box create Bad_Name
grep -q "name" <<<"$err" || fail "bad name: $err"
expect 2 box rm work
expect 0 box rm work --yes
expect 0 boxes --json
[[ $(json '[b["name"] for b in v]' <<<"$out") == "['main']" ]] || fail "after box rm: $out"
ok "box create/rm: quota, duplicate and bad names refused with exit 1, rm asks first"

# --- the api unreachable ---
cp "$cfg/cli.json" "$tmp/cli.json.bak"
printf '{"endpoint": "http://127.0.0.1:1"}\n' > "$cfg/cli.json"
expect 1 status
grep -q "cannot reach the api" <<<"$err" || fail "unreachable: $err"
cp "$tmp/cli.json.bak" "$cfg/cli.json"
ok "an unreachable api is exit 1 with a clear message"

# --- credential helper ---
expect 0 logout
[[ ! -e $cfg/token && ! -e $cfg/cli.json ]] || fail "logout left files"
expect 1 status
cat > "$tmp/helper" <<HELPER
#!/bin/sh
# A credential helper keeping the token in a file of its own.
store=$tmp/helper-store
case \$1 in
  get) sed -n 's/^token=//p' "\$store" 2>/dev/null | sed 's/^/token=/' ;;
  store) grep '^token=' > "\$store" ;;
  erase) rm -f "\$store" ;;
esac
HELPER
chmod +x "$tmp/helper"
echo "$alice" | "$bin" login --endpoint "$endpoint" --token - --credential-helper "$tmp/helper" >/dev/null \
  || fail "login with a credential helper"
[[ ! -e $cfg/token ]] || fail "token file written despite the helper"
[[ $(cat "$tmp/helper-store") == "token=$alice" ]] || fail "helper did not get the token"
expect 0 status --json
expect 0 logout
[[ ! -e $tmp/helper-store ]] || fail "logout did not erase through the helper"
ok "a credential helper keeps the token; logout erases it"

# --- completion ---
expect 0 completion bash
bash -n <<<"$out" || fail "bash completion has a syntax error"
grep -q "complete -F _cocoonbox cocoonbox" <<<"$out" || fail "bash completion"
for c in save snapshots browse restore agents chat mcp; do
  grep -qE "compgen -W \"[^\"]* $c( |\")" <<<"$out" || fail "bash completion does not offer $c"
done
expect 0 completion zsh
[[ $(head -1 <<<"$out") == "#compdef cocoonbox" ]] || fail "zsh completion"
if command -v zsh >/dev/null; then zsh -n <<<"$out" || fail "zsh completion syntax"; fi
expect 2 completion fish
ok "shell completion for bash and zsh"

# --- setup and mcp-headers (seed §13.2, §13.5) ---
echo "$alice" | "$bin" login --endpoint "$endpoint" --token - >/dev/null || fail "login for setup"
fake_home=$tmp/home
mkdir -p "$fake_home/.codex"
printf '{"numStartups": 7, "mcpServers": {"other": {"command": "x"}}}\n' >"$fake_home/.claude.json"
printf 'model = "o3"\n\n[mcp_servers.cocoonbox]\ncommand = "old"\n\n[mcp_servers.cocoonbox.env]\nA = "1"\n\n[tui]\nx = 1\n' \
  >"$fake_home/.codex/config.toml"
HOME=$fake_home expect 0 setup cursor --print
[[ ! -e $fake_home/.cursor ]] || fail "setup --print wrote a file"
grep -q '"mcp"' <<<"$out" || fail "setup --print shows no entry: $out"
for client in claude codex cursor; do HOME=$fake_home expect 0 setup "$client" --json; done
HOME=$fake_home expect 0 setup codex --box work --json
[[ $(json 'v["replaced"]' <<<"$out") == True ]] || fail "setup codex twice did not replace: $out"
python3 - "$fake_home" "$bin" <<'PY' || fail "setup wrote the wrong entries"
import json, sys, tomllib
home, binary = sys.argv[1], sys.argv[2]
claude = json.load(open(home + "/.claude.json"))
assert claude["numStartups"] == 7 and claude["mcpServers"]["other"] == {"command": "x"}, claude
assert list(claude)[0] == "numStartups", "key order not kept"
assert claude["mcpServers"]["cocoonbox"] == {"type": "stdio", "command": binary, "args": ["mcp"], "env": {}}, claude
cursor = json.load(open(home + "/.cursor/mcp.json"))
assert cursor["mcpServers"]["cocoonbox"] == {"command": binary, "args": ["mcp"]}, cursor
codex = tomllib.load(open(home + "/.codex/config.toml", "rb"))
assert codex["model"] == "o3" and codex["tui"] == {"x": 1}, codex
assert codex["mcp_servers"]["cocoonbox"] == {"command": binary, "args": ["mcp", "--box", "work"]}, codex
PY
[[ $(stat -c %a "$fake_home/.cursor/mcp.json") == 600 ]] || fail "a new client config is not 0600"
! grep -rqF "$alice" "$fake_home" || fail "the token is in a client's config"
! grep -rqF "127.0.0.1:$port" "$fake_home" || fail "the endpoint is in a client's config"
HOME=$fake_home expect 2 setup vim
expect 0 mcp-headers
[[ $(json 'v["Authorization"]' <<<"$out") == "Bearer $alice" ]] || fail "mcp-headers: $out"
expect 0 logout
expect 1 mcp-headers
grep -q "not logged in" <<<"$err" || fail "mcp-headers logged out: $err"
ok "setup claude|codex|cursor writes a token-free entry and keeps the rest; mcp-headers"

# The README's walk-through: the printed login line, then ensure.
cocoonbox() { "$bin" "$@"; }  # as if installed on PATH
eval "$login_line" >/dev/null 2>&1 || fail "the printed login line: $login_line"
expect 0 ensure --json
[[ $(json 'v["state"]' <<<"$out") == running ]] || fail "admin's first box: $out"
ok "the api's printed login line works as is; ensure gives a running box"
echo "$passed passed, 0 failed"
