#!/usr/bin/env bash
# `cocoonbox rsh` end to end through a real api's edge and the box's agent (seed §13.7): exit
# codes and stderr kept apart, 50 MiB through cat both ways, a PTY with resize, signals
# forwarded (130/143, a remote trap's own code), real rsync (first run, no change, one change)
# and real git (clone, push, with and without GIT_SSH_VARIANT=simple), a second call while an
# Exec holds a full stdin, rsh's own failures as 255, and (issue 3) a marker process that keeps
# its PID across Hibernate and Ensure and does not run while the box is HIBERNATED.
# Usage: rsh.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
e2e_cleanup_hook() { tmux -L "cb-rsh-test-$$" kill-server 2>/dev/null; }
rsh() { "$bin" rsh "$@"; }
box_sh() { rsh --box main "$@" </dev/null; }

start_api
set +e
out=$(rsh true 2>&1); rc=$?
set -e
[[ $rc == 255 && $out == *"not logged in"* ]] || fail "rsh before login: $rc $out"
"$bin" login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
"$bin" ensure >/dev/null 2>&1 || fail "ensure"

# --- §13.7: uname -a; false; exit 42 ---
set +e
rsh --box main 'uname -a; id -un; pwd; echo to-stderr >&2; false; echo "false gave $?"; exit 42' \
  >"$tmp/o" 2>"$tmp/e" </dev/null
rc=$?
set -e
[[ $rc == 42 ]] || fail "exit code $rc, want 42"
grep -q '^Linux ' "$tmp/o" || fail "no uname: $(cat "$tmp/o")"
grep -qx '/workspace' "$tmp/o" || fail "not in /workspace: $(cat "$tmp/o")"
grep -qx 'false gave 1' "$tmp/o" || fail "false: $(cat "$tmp/o")"
[[ $(cat "$tmp/e") == to-stderr ]] || fail "stderr not kept apart: $(cat "$tmp/e")"
! grep -q to-stderr "$tmp/o" || fail "stderr leaked into stdout"
[[ $(sed -n 2p "$tmp/o") != root ]] || fail "runs as root in the box"
ok "uname -a; false; exit 42: codes 1 and 42, stderr apart, $(sed -n 2p "$tmp/o") in /workspace"

# --- 50 MiB through cat, both ways ---
head -c $((50 * 1024 * 1024)) /dev/urandom >"$tmp/big"
want=$(sha256sum <"$tmp/big" | cut -d' ' -f1)
rsh 'cat > /workspace/big' <"$tmp/big" || fail "upload"
[[ $(box_sh 'sha256sum < /workspace/big' | cut -d' ' -f1) == "$want" ]] || fail "upload sha256"
[[ $(box_sh 'cat /workspace/big' | sha256sum | cut -d' ' -f1) == "$want" ]] || fail "download sha256"
[[ $(rsh cat <"$tmp/big" | sha256sum | cut -d' ' -f1) == "$want" ]] || fail "round trip sha256"
# rsync hands the remote shell a non-blocking stdout: a slow reader must not cost a byte.
nonblock='import fcntl, os, sys
fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_NONBLOCK)
os.execv(sys.argv[1], sys.argv[1:])'
got=$(/usr/bin/python3 -c "$nonblock" "$bin" rsh --box main 'cat /workspace/big' </dev/null |
  (sleep 1; sha256sum) | cut -d' ' -f1)
[[ $got == "$want" ]] || fail "download to a non-blocking stdout and a slow reader"
box_sh 'rm /workspace/big'
ok "50 MiB of random data through cat: upload, download (also to a slow non-blocking stdout), round trip"

# --- a PTY: size, TERM, typed input, resize, exit code ---
set +e
/usr/bin/python3 "$here/pty_drive.py" "$bin" rsh -t \
  'tty; echo TERM=$TERM; stty size; echo READY; read x; echo got=$x; stty size; exit 5' >"$tmp/pty"
rc=$?
set -e
tr -d '\r' <"$tmp/pty" >"$tmp/pty.txt"
[[ $rc == 5 ]] || fail "-t exit $rc: $(cat "$tmp/pty.txt")"
grep -q '^/dev/pts/' "$tmp/pty.txt" || fail "no tty: $(cat "$tmp/pty.txt")"
grep -qx 'TERM=xterm-256color' "$tmp/pty.txt" || fail "TERM: $(cat "$tmp/pty.txt")"
grep -qx '33 111' "$tmp/pty.txt" || fail "size: $(cat "$tmp/pty.txt")"
grep -qx 'got=hello' "$tmp/pty.txt" || fail "typed input: $(cat "$tmp/pty.txt")"
grep -qx '44 132' "$tmp/pty.txt" || fail "resize: $(cat "$tmp/pty.txt")"
ok "-t: a pty of 33x111 with TERM, typed input read, resized to 44x132, exit 5 passed through"

# The same from inside tmux, a terminal people really use (its own server socket, killed after).
sock=cb-rsh-test-$$
tmux -L "$sock" new-session -d -x 111 -y 33 \
  "$bin rsh -t 'stty size; echo READY; read x; echo got=\$x; stty size; exit 5'; echo rc=\$? > $tmp/tmux.rc; sleep 30"
for _ in $(seq 1 100); do tmux -L "$sock" capture-pane -p | grep -q READY && break; sleep 0.1; done
tmux -L "$sock" resize-window -x 132 -y 44
sleep 0.3
tmux -L "$sock" send-keys hello Enter
for _ in $(seq 1 100); do [[ -s $tmp/tmux.rc ]] && break; sleep 0.1; done
screen=$(tmux -L "$sock" capture-pane -p)
tmux -L "$sock" kill-server 2>/dev/null || true
[[ $(cat "$tmp/tmux.rc" 2>/dev/null) == rc=5 ]] || fail "tmux: $(cat "$tmp/tmux.rc" 2>/dev/null) $screen"
grep -qx '33 111' <<<"$screen" && grep -qx 'got=hello' <<<"$screen" && grep -qx '44 132' <<<"$screen" ||
  fail "tmux screen: $screen"
ok "-t under tmux: stty size follows the window's resize, typed input echoes, exit 5"

# --- signals ---
set +e
timeout --preserve-status -s INT 2 "$bin" rsh 'sleep 30' </dev/null; rc_int=$?
out=$(timeout --preserve-status -s INT 2 "$bin" rsh 'trap "echo got-int; exit 9" INT; sleep 30 & wait' </dev/null); rc_trap=$?
timeout --preserve-status -s TERM 2 "$bin" rsh 'sleep 31' </dev/null; rc_term=$?
yes | timeout --preserve-status -s INT 2 "$bin" rsh 'sleep 32'; rc_full=$?
# stdin in 1000-byte writes: rsh's reads never add up to the agent's 4 MiB stdin credit, so a
# read that went past the credit (and held the INT behind it) would happen every time.
thousands='import os
while True: os.write(1, b"y" * 1000)'
/usr/bin/python3 -c "$thousands" 2>/dev/null |
  timeout --preserve-status -s INT 2 "$bin" rsh 'sleep 33'; rc_odd=${PIPESTATUS[1]}
set -e
[[ $rc_int == 130 ]] || fail "SIGINT: rsh exited $rc_int, want 130"
[[ $rc_trap == 9 && $out == got-int ]] || fail "remote trap: $rc_trap $out"
[[ $rc_term == 143 ]] || fail "SIGTERM: rsh exited $rc_term, want 143"
[[ $rc_full == 130 ]] || fail "SIGINT with a full stdin: $rc_full"
[[ $rc_odd == 130 ]] || fail "SIGINT with a full stdin sent in odd reads: $rc_odd"
[[ $(box_sh 'ps -eo args | grep -c "^sleep 3[0-3]"') == 0 ]] || fail "remote sleeps survived"
ok "SIGINT -> 130, SIGTERM -> 143, a remote trap's exit 9, also with a full stdin; nothing left"

# --- a second call while an Exec holds a full stdin ---
yes | "$bin" rsh 'sleep 6' &
stalled=$!
sleep 1
rsh true </dev/null || fail "second call"
kill -0 "$stalled" 2>/dev/null || fail "the stalled Exec ended early"
kill -INT "$stalled"; wait "$stalled" 2>/dev/null || true
ok "a second call completes while another Exec holds a full stdin on the same agent connection"

# --- the token is in no process's argv or environment (the pattern comes from the file, so
# grep's own argv does not hold it) ---
"$bin" rsh 'sleep 2' </dev/null &
held=$!
sleep 0.7
leaks=$(grep -l -a -F -f "$data/admin.token" /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null || true)
wait "$held" || fail "held call"
[[ -z $leaks ]] || fail "the token is visible in: $leaks"
[[ $(stat -c %a "$XDG_CONFIG_HOME/cocoonbox/token") == 600 ]] || fail "token file mode"
ok "the token is in no process's argv or environment while rsh runs; stored 0600"

# --- rsync ---
src=$tmp/tree
mkdir -p "$src"
for d in $(seq 1 20); do
  mkdir -p "$src/d$d"
  for f in $(seq 1 50); do echo "file $d/$f $RANDOM" >"$src/d$d/f$f.txt"; done
done
head -c 300000 /dev/urandom >"$src/d1/blob.bin"
tree_sum() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum); }
rsync -a --stats -e "$bin rsh" "$src/" box:/workspace/tree/ >"$tmp/r1" || fail "rsync first run"
[[ $(box_sh 'cd /workspace/tree && find . -type f | LC_ALL=C sort | xargs sha256sum') == "$(tree_sum "$src")" ]] ||
  fail "trees differ after the first run"
rsync -a --stats -e "$bin rsh" "$src/" box:/workspace/tree/ >"$tmp/r2" || fail "rsync no change"
grep -q 'Number of regular files transferred: 0' "$tmp/r2" || fail "no-change run transferred files"
sent=$(sed -n 's/^Total bytes sent: \([0-9,]*\).*/\1/p' "$tmp/r2" | tr -d ,)
((sent < 64 * 1024)) || fail "the no-change run sent $sent bytes"
echo changed >>"$src/d7/f7.txt"
rsync -a --stats -e "$bin rsh" "$src/" main.box:/workspace/tree/ >"$tmp/r3" || fail "rsync one change"
grep -q 'Number of regular files transferred: 1' "$tmp/r3" || fail "one-change run: $(grep transferred "$tmp/r3")"
[[ $(box_sh 'cd /workspace/tree && find . -type f | LC_ALL=C sort | xargs sha256sum') == "$(tree_sum "$src")" ]] ||
  fail "trees differ after the change"
rsync -a -e "$bin rsh -l someone" box:/workspace/tree/ "$tmp/back/" || fail "rsync back with -l"
[[ $(tree_sum "$tmp/back") == "$(tree_sum "$src")" ]] || fail "tree pulled back differs"
ok "rsync of 1001 files: first run, no change (0 files, $sent bytes sent), one change (1 file), pulled back equal"

# --- git ---
box_sh 'set -e; mkdir -p /workspace/repo && cd /workspace/repo && git init -q -b main . &&
  git -c user.email=b@x -c user.name=box commit -q --allow-empty -m "made in the box"' || fail "box repo"
export GIT_SSH_COMMAND="$bin rsh --box main"
git clone -q box:/workspace/repo "$tmp/clone" || fail "git clone (probe, then simple)"
[[ $(git -C "$tmp/clone" log --format=%s) == "made in the box" ]] || fail "clone content"
GIT_SSH_VARIANT=simple git clone -q box:/workspace/repo "$tmp/clone2" || fail "git clone (simple)"
GIT_SSH_VARIANT=ssh git -c protocol.version=2 clone -q "ssh://box:2222/workspace/repo" "$tmp/clone3" ||
  fail "git clone (ssh variant: -p, -o SendEnv=GIT_PROTOCOL)"
(cd "$tmp/clone" && git -c user.email=a@x -c user.name=me commit -q --allow-empty -m "from here" &&
  git push -q origin main:pushed) || fail "git push"
[[ $(box_sh 'git -C /workspace/repo log --format=%s pushed') == *"from here"* ]] || fail "push content"
box_sh 'cd /workspace/repo && git -c user.email=b@x -c user.name=box commit -q --allow-empty -m second'
git -C "$tmp/clone" fetch -q && [[ $(git -C "$tmp/clone" log --format=%s origin/main | head -1) == second ]] ||
  fail "fetch of a commit made in the box"
unset GIT_SSH_COMMAND
ok "git: clone (probe -> simple, simple, ssh variant), push, fetch"

# --- issue 3: a marker process keeps its PID across Hibernate/Ensure and is frozen meanwhile ---
box_id=$("$bin" status --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
counter=$data/boxes/$box_id/workspace/counter
marker=$(box_sh 'setsid sh -c "i=0; while :; do i=\$((i+1)); echo \$i > /workspace/counter.tmp;
  mv /workspace/counter.tmp /workspace/counter; sleep 0.05; done" </dev/null >/dev/null 2>&1 &
  echo $!') || fail "start the marker"
start_of() { box_sh "cut -d' ' -f22 /proc/$1/stat"; }
born=$(start_of "$marker") || fail "marker not running"
sleep 0.5
"$bin" hibernate >/dev/null 2>&1 || fail "hibernate"
frozen=$(cat "$counter")
sleep 1
[[ $(cat "$counter") == "$frozen" ]] || fail "the counter advanced while HIBERNATED ($frozen -> $(cat "$counter"))"
"$bin" ensure >/dev/null 2>&1 || fail "ensure"
[[ $(start_of "$marker") == "$born" ]] || fail "marker $marker is not the same process after the wake"
sleep 0.5
(($(cat "$counter") > frozen)) || fail "the counter did not move on after the wake"
ok "a marker process keeps PID $marker across Hibernate and Ensure; its counter stood still at $frozen"
"$bin" upgrade --yes >/dev/null 2>&1 || fail "upgrade"
now=$(start_of "$marker" 2>/dev/null || true)
[[ $now != "$born" ]] || fail "the marker survived a Recreate"
ok "Recreate restarts the box's processes"

# --- rsh's own failures ---
set +e
err=$(rsh -L 1:2:3 box true 2>&1); rc=$?
set -e
[[ $rc == 255 && $err == *"-L"* ]] || fail "unknown option: $rc $err"
set +e
err=$(rsh --box nosuch true 2>&1 </dev/null); rc=$?
set -e
[[ $rc == 255 && $err == *nosuch* ]] || fail "unknown box: $rc $err"
rsh -G box 2>/dev/null && fail "-G probe answered 0"
ok "unknown ssh option, unknown box and git's -G probe: exit 255"
echo "$passed passed, 0 failed"
