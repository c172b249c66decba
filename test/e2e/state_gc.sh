#!/usr/bin/env bash
# The state layer's GC pass end to end (seed §25.3, §25.6 steps 4 and 6; issue 7): a real api,
# a local-backend box, the CLI and `cocoonbox api state prune`.
#
#   - a running api holds the data dir: `state prune` and a second api are refused, naming
#     its pid;
#   - six saves (a base, then five each replacing one known file); `state prune --now T`
#     (dry run, then for real, under a mixed rule and the default one) keeps exactly the set an
#     independent transcription of the rule (below, in Python) computes, and the sweep leaves
#     exactly the chunks the kept snapshots reference: each save's new chunk keys are
#     recorded from the store's listing, so a snapshot's chunks are the base's plus its own;
#   - a file restore from every kept snapshot has the sha256 written before that save;
#   - kill -9 of the api in the middle of a large save (once its chunks reach the store), of
#     `state prune` in the middle of its deletes and of the api in the middle of its own
#     pass's deletes (killed once its 6th delete batch's progress line was read from a 4 KiB
#     pipe that is then no longer read, so it cannot get more than a pipe's worth of lines
#     further: a real observable point, no timing): every committed snapshot still restores
#     byte-exact, the next save works, and the next sweep leaves exactly the referenced chunks;
#   - the api's own pass at start logs one line for the user with what it dropped and freed.
# Usage: state_gc.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
rsh() { local box=$1; shift; "$bin" rsh --box "$box" "$@"; }
cb() { "$bin" "$@"; }
prune() { "$bin" api --data-dir "$data" "$@"; }
store=$data/state
refs=$tmp/refs.json  # snapshot id -> the chunk keys it references
echo '{}' >"$refs"

# The store's chunk keys and all its keys (packed or not), as `state ls` lists them.
chunks() { "$bin" api --data-dir "$data" state ls u1/chunks/ | cut -d' ' -f1 | sort; }
objects() { "$bin" api --data-dir "$data" state ls | cut -d' ' -f1 | sort; }
stop_api() {
  kill -TERM "$api_pid"
  wait "$api_pid" 2>/dev/null || true
  api_pid=""
}
# snapshot id, then chunk key files: refs[id] = the union of the files' lines.
set_refs() {
  local id=$1; shift
  /usr/bin/python3 - "$refs" "$id" "$@" <<'PY'
import json, sys
path, sid, files = sys.argv[1], sys.argv[2], sys.argv[3:]
refs = json.load(open(path))
s = set()
for f in files:
    s |= {l.strip() for l in open(f) if l.strip()}
refs[sid] = sorted(s)
json.dump(refs, open(path, "w"))
PY
}

# The retention rule of src/state/retention.h, written again from its description: per tier,
# the newest snapshot (then greatest id) of each bucket among those of age 0 <= a < span;
# hours, UTC days, weeks from Monday 00:00 UTC; the head always; a snapshot after now kept.
# Prints the kept ids, and with --chunks the chunk keys they reference, one per line.
cat >"$tmp/expect.py" <<'PY'
import json, sys
snaps = json.load(open(sys.argv[1]))      # `cocoonbox snapshots --json` (newest first)
head, now, rule, refs = sys.argv[2], int(sys.argv[3]), sys.argv[4], json.load(open(sys.argv[5]))
H, D = 3600_000, 86400_000
unit = {"s": 1000, "m": 60_000, "h": H, "d": D, "w": 7 * D}
tiers, keep_all = [], 0
for part in rule.split(","):
    name, val = part.split("=")
    span = int(val[:-1]) * unit[val[-1]]
    if name == "all": keep_all = span
    else: tiers.append({"hourly": (H, 0), "daily": (D, 0), "weekly": (7 * D, 4 * D)}[name] + (span,))
kept = set()
for s in snaps:
    a = now - s["saved_at_ms"]
    if s["id"] == head or a < 0 or a < keep_all: kept.add(s["id"])
for width, offset, span in tiers:
    best = {}
    for s in snaps:
        a = now - s["saved_at_ms"]
        if not (0 <= a < span): continue
        b = (s["saved_at_ms"] - offset) // width
        if b not in best or (s["saved_at_ms"], s["id"]) > (best[b]["saved_at_ms"], best[b]["id"]):
            best[b] = s
    kept |= {s["id"] for s in best.values()}
if len(sys.argv) > 6:
    print("\n".join(sorted({c for k in kept for c in refs[k]})))
else:
    print("\n".join(sorted(kept)))
PY
expect_kept() { /usr/bin/python3 "$tmp/expect.py" "$@"; }
# The ids a `state prune --json` kept and dropped, sorted.
report_ids() { json "'\\n'.join(sorted(d['id'] for u in v['users'] for b in u['boxes'] for d in b['$1']))" <"$2"; }
# Restores /workspace/gc/roll and /workspace/gc/keep of every snapshot in the timeline and
# compares their sha256 with what was written before that save.
restore_all() {
  local id path
  cb snapshots --json >"$tmp/snaps.now.json" || fail "snapshots"
  for id in $(json '" ".join(s["id"] for s in v)' <"$tmp/snaps.now.json"); do
    cb restore /workspace/gc --snapshot "$id" --json >"$tmp/r.json" 2>"$tmp/r.err" ||
      fail "restore from $id: $(cat "$tmp/r.err")"
    path=$(json 'v["path"]' <"$tmp/r.json")
    rsh main "sha256sum '$path/workspace/gc/roll' '$path/workspace/gc/keep'" | cut -d' ' -f1 >"$tmp/got"
    [[ $(sed -n 1p "$tmp/got") == "$(cat "$tmp/sha.$id")" ]] || fail "roll of $id restored with another sha256"
    [[ $(sed -n 2p "$tmp/got") == "$keep_sha" ]] || fail "keep of $id restored with another sha256"
  done
  # Out of the next saves (the box's home is <data>/boxes/<id>/home on the host; the restored
  # tree keeps the saved owners, which the box's user may not remove).
  rm -rf "$data/boxes/$box_id/home/Restored" || fail "rm Restored"
  echo "$(json 'len(v)' <"$tmp/snaps.now.json")"
}
# A save whose new chunk keys are recorded; sets snap (its id). $1: the file whose sha256 is
# this snapshot's roll; the remaining args: chunk lists it references besides its own.
save_recorded() {
  chunks >"$tmp/c.before"
  cb save --json >"$tmp/save.json" 2>"$tmp/save.err" || fail "save: $(cat "$tmp/save.err")"
  chunks >"$tmp/c.after"
  snap=$(json 'v["snapshot"]["id"]' <"$tmp/save.json")
  comm -13 "$tmp/c.before" "$tmp/c.after" >"$tmp/new.$snap"
  [[ $(wc -l <"$tmp/new.$snap") == $(json 'v["uploaded_chunks"]' <"$tmp/save.json") ]] ||
    fail "save $snap: the store gained $(wc -l <"$tmp/new.$snap") chunks, the save says $(cat "$tmp/save.json")"
  rsh main 'cat /workspace/gc/roll 2>/dev/null | sha256sum' | cut -d' ' -f1 >"$tmp/sha.$snap"
  set_refs "$snap" "$tmp/new.$snap" "$@"
}

start_api --autosave 0 --state-gc-interval 0
cb login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
cb ensure >/dev/null 2>&1 || fail "ensure"
box_id=$(cb status --json | json 'v["id"]')
[[ -d $data/boxes/$box_id/home ]] || fail "no home of $box_id on the host"

# --- a running api holds the data dir ---
if prune state prune >"$tmp/p.out" 2>&1; then fail "state prune ran beside a running api"; fi
grep -q "pid $api_pid" "$tmp/p.out" || fail "state prune does not name the api's pid: $(cat "$tmp/p.out")"
grep -q "cocoonbox api is running" "$tmp/p.out" || fail "state prune: $(cat "$tmp/p.out")"
rc=0; "$bin" api --data-dir "$data" --listen 127.0.0.1:0 >"$tmp/second.out" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "pid $api_pid" "$tmp/second.out" ||
  fail "a second api on the data dir: exit $rc, $(cat "$tmp/second.out")"
ok "a running api holds its data dir: state prune and a second api are refused, naming pid $api_pid"

# --- six saves: a base with a file that stays, then five that each write one known file ---
rsh main 'mkdir -p /workspace/gc && head -c 300000 /dev/urandom >/workspace/gc/keep &&
  touch -d "1 hour ago" /workspace/gc/keep' || fail "write"
keep_sha=$(rsh main 'sha256sum /workspace/gc/keep' | cut -d' ' -f1)
save_recorded
base=$snap
cp "$tmp/new.$base" "$tmp/base.chunks"
for i in 1 2 3 4 5; do
  rsh main "head -c 200000 /dev/urandom >/workspace/gc/roll" || fail "write roll $i"
  save_recorded "$tmp/base.chunks"
  [[ $(json 'v["snapshot"]["changed_files"]' <"$tmp/save.json") == 1 ]] || fail "save $i: $(cat "$tmp/save.json")"
  (( $(wc -l <"$tmp/new.$snap") > 0 )) || fail "save $i stored no chunk"
  declare "s$i=$snap"
done
cb snapshots --json >"$tmp/snaps.json"
[[ $(json 'len(v)' <"$tmp/snaps.json") == 6 ]] || fail "snapshots: $(cat "$tmp/snaps.json")"
ok "six saves; each of the last five changed one file and stored its own chunks"
stop_api

# --- prune at <save 3 + 40 days> keeping everything younger than 40 days and weekly ---
rule=all=40d,weekly=26w
now_ms=$(( $(json '[s for s in v if s["id"] == "'"$s3"'"][0]["saved_at_ms"]' <"$tmp/snaps.json") + 40 * 86400000 ))
now_arg="@$((now_ms / 1000)).$(printf %03d $((now_ms % 1000)))"
(cd "$store" && find . -type f | sort) >"$tmp/all.before"
objects >"$tmp/objects.before"
prune --state-keep "$rule" state prune --now "$now_arg" --dry-run --json >"$tmp/dry.json" ||
  fail "dry run: $(cat "$tmp/dry.json")"
(cd "$store" && find . -type f | sort) >"$tmp/all.after"
cmp -s "$tmp/all.before" "$tmp/all.after" || fail "the dry run changed the store"
expect_kept "$tmp/snaps.json" "$s5" "$now_ms" "$rule" "$refs" >"$tmp/want.kept"
report_ids kept "$tmp/dry.json" >"$tmp/got.kept"
cmp -s "$tmp/want.kept" "$tmp/got.kept" || fail "dry run kept $(cat "$tmp/got.kept"), the rule keeps $(cat "$tmp/want.kept")"
(( $(wc -l <"$tmp/want.kept") >= 2 && $(wc -l <"$tmp/want.kept") < 6 )) || fail "the rule keeps $(cat "$tmp/want.kept")"
prune --state-keep "$rule" state prune --now "$now_arg" --json >"$tmp/p1.json" 2>"$tmp/p1.err" || fail "prune: $(cat "$tmp/p1.err")"
report_ids kept "$tmp/p1.json" >"$tmp/got.kept"
cmp -s "$tmp/want.kept" "$tmp/got.kept" || fail "prune kept $(cat "$tmp/got.kept"), the rule keeps $(cat "$tmp/want.kept")"
expect_kept "$tmp/snaps.json" "$s5" "$now_ms" "$rule" "$refs" --chunks >"$tmp/want.chunks"
chunks >"$tmp/got.chunks"
cmp -s "$tmp/want.chunks" "$tmp/got.chunks" ||
  fail "after the sweep the store holds $(wc -l <"$tmp/got.chunks") chunks, the kept snapshots reference $(wc -l <"$tmp/want.chunks")"
deleted=$(json 'v["users"][0]["chunks"]["deleted"]' <"$tmp/p1.json")
[[ $(json 'v["users"][0]["chunks"]["deleted"]' <"$tmp/dry.json") == "$deleted" ]] ||
  fail "the dry run counted $(json 'v["users"][0]["chunks"]["deleted"]' <"$tmp/dry.json") chunks to delete, the prune deleted $deleted"
(( deleted == $(wc -l <"$tmp/objects.before" | tr -d ' ') - $(objects | wc -l) - $(json 'v["users"][0]["boxes"][0]["deleted_objects"]' <"$tmp/p1.json") )) ||
  fail "the report's counts do not match the store: $(cat "$tmp/p1.json")"
ok "state prune --now <save 3 + 40d> --state-keep $rule kept exactly the rule's $(wc -l <"$tmp/want.kept") snapshots; $deleted chunks deleted, the rest all referenced"

# --- a file restore from every kept snapshot ---
start_api --autosave 0 --state-gc-interval 0
n=$(restore_all)
[[ $n == $(wc -l <"$tmp/want.kept") ]] || fail "the timeline holds $n snapshots after the prune"
ok "a restore from each of the $n kept snapshots has the sha256 written before its save"
stop_api

# --- the default rule 40 days ahead ---
now_ms=$(( $(date +%s%3N) + 40 * 86400000 ))
prune state prune --now "+40d" --json >"$tmp/p2.json" 2>"$tmp/p2.err" || fail "prune 2: $(cat "$tmp/p2.err")"
cut_ms=$(json 'v["now_ms"]' <"$tmp/p2.json")
(( cut_ms >= now_ms )) || fail "--now +40d gave $cut_ms"
cp "$tmp/snaps.json" "$tmp/snaps.all.json"
/usr/bin/python3 - "$tmp/snaps.json" "$tmp/want.kept" >"$tmp/snaps.kept.json" <<'PY'
import json, sys
kept = set(open(sys.argv[2]).read().split())
print(json.dumps([s for s in json.load(open(sys.argv[1])) if s["id"] in kept]))
PY
expect_kept "$tmp/snaps.kept.json" "$s5" "$cut_ms" hourly=24h,daily=30d,weekly=26w "$refs" >"$tmp/want.kept"
report_ids kept "$tmp/p2.json" >"$tmp/got.kept"
cmp -s "$tmp/want.kept" "$tmp/got.kept" || fail "prune +40d kept $(cat "$tmp/got.kept"), the rule keeps $(cat "$tmp/want.kept")"
expect_kept "$tmp/snaps.kept.json" "$s5" "$cut_ms" hourly=24h,daily=30d,weekly=26w "$refs" --chunks >"$tmp/want.chunks"
chunks >"$tmp/got.chunks"
cmp -s "$tmp/want.chunks" "$tmp/got.chunks" || fail "after prune +40d: chunks differ from the kept snapshots' mark"
prune state prune --now "+40d" >"$tmp/p2.txt" 2>&1 || fail "prune 3: $(cat "$tmp/p2.txt")"
grep -q "0 deleted, 0 bytes freed" "$tmp/p2.txt" || fail "a second prune: $(cat "$tmp/p2.txt")"
# The store as the server names it with --state-store (a file:// URL here) is the same store.
prune --state-store "file://$store" state prune --now "+40d" --dry-run --json >"$tmp/p3.json" ||
  fail "prune --state-store: $(cat "$tmp/p3.json")"
[[ $(json 'v["users"][0]["chunks"]["listed"]' <"$tmp/p3.json") == $(chunks | wc -l) ]] ||
  fail "prune --state-store file:// listed another store: $(cat "$tmp/p3.json")"
ok "state prune --now +40d (default rule) kept exactly $(cat "$tmp/want.kept" | wc -l) snapshot(s), the head; a second run deletes nothing"

start_api --autosave 0 --state-gc-interval 0
n=$(restore_all)
ok "and from the $n left after it"

# --- kill -9 of the api in the middle of a large save ---
rsh main 'head -c 256M /dev/urandom >/workspace/gc/big' || fail "write big"
cb snapshots --json >"$tmp/snaps.before_kill.json"
chunks >"$tmp/c.before"
before=$(wc -l <"$tmp/c.before")
cb save >"$tmp/big.out" 2>"$tmp/big.err" &
save_pid=$!
# Its first chunks in the store prove the save is under way (a 256 MiB save stores ~4000).
until (( $(chunks | wc -l) > before )); do
  kill -0 "$save_pid" 2>/dev/null || fail "the large save ended before storing a chunk: $(cat "$tmp/big.err")"
  sleep 0.02
done
kill_api
wait "$save_pid" 2>/dev/null && big_committed=1 || big_committed=0
start_api --autosave 0 --state-gc-interval 0
cb snapshots --json >"$tmp/snaps.after_kill.json"
if [[ $big_committed == 0 ]]; then
  cmp -s <(json '[s["id"] for s in v]' <"$tmp/snaps.before_kill.json") <(json '[s["id"] for s in v]' <"$tmp/snaps.after_kill.json") ||
    fail "the killed save left a snapshot: $(cat "$tmp/snaps.after_kill.json")"
else
  echo "note: the large save committed before the kill landed" >&2
fi
leftover=$(( $(chunks | wc -l) - before ))
n=$(restore_all)
rsh main 'rm /workspace/gc/big' || fail "rm big"
save_recorded "$tmp/base.chunks" "$tmp/new.$s5"
[[ $(wc -l <"$tmp/new.$snap") == 0 ]] || fail "the save after the crash uploaded chunks: $(cat "$tmp/save.json")"
last=$snap
ok "kill -9 in the middle of a large save ($leftover chunks stored): the $n committed snapshots restore byte-exact; the next save works"
stop_api
prune --state-keep all=1s state prune --now +40d --json >"$tmp/p4.json" 2>"$tmp/p4.err" || fail "prune 4: $(cat "$tmp/p4.err")"
sort "$tmp/base.chunks" "$tmp/new.$s5" | uniq >"$tmp/want.chunks"
chunks >"$tmp/got.chunks"
cmp -s "$tmp/want.chunks" "$tmp/got.chunks" ||
  fail "the sweep after the crash left $(wc -l <"$tmp/got.chunks") chunks, want the $(wc -l <"$tmp/want.chunks") the head references"
ok "the next sweep removed the killed save's $(json 'v["users"][0]["chunks"]["deleted"]' <"$tmp/p4.json") leftover chunks, and nothing else"

# kill_in_deletes OUT CMD...: runs CMD with its stderr on a 4 KiB pipe that is read up to the
# progress line announcing the 6th delete batch of user u1's sweep ("sweep u1: deleted 5 of",
# plain or inside a JSON log line) and then not at all, kills it with SIGKILL and writes the
# first such line to OUT. Batches 1-5 are done (each line is written before its batch), and
# the process can write at most 4 KiB more (about 100 lines) before it blocks, so the kill
# lands in the deletes with most of the garbage still there. No timing is involved.
kill_in_deletes() {
  local out=$1
  shift
  /usr/bin/python3 - "$@" >"$out" <<'PY'
import fcntl, os, subprocess, sys
r, w = os.pipe()
fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: the smallest pipe
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=w)
os.close(w)
line, first = b"", b""
while True:
    c = os.read(r, 1)
    if not c:
        sys.exit("ended before its sweep deleted: " + line.decode())
    line += c
    if c == b"\n":
        if b"sweep u1: deleted " in line:
            first = first or line
            if b"sweep u1: deleted 5 of " in line:
                break
        line = b""
p.kill()
p.wait()
print(first.decode().strip())
PY
}

# --- kill -9 of state prune in the middle of its deletes ---
start_api --autosave 0 --state-gc-interval 0
rsh main 'head -c 24M /dev/urandom >/workspace/gc/junk' || fail "write junk"
save_recorded "$tmp/base.chunks" "$tmp/new.$s5"
junk_chunks=$(wc -l <"$tmp/new.$snap")
rsh main 'rm /workspace/gc/junk' || fail "rm junk"
save_recorded "$tmp/base.chunks" "$tmp/new.$s5"
last=$snap
stop_api
chunks >"$tmp/c.before"
# state prune -v writes a progress line before each delete batch: kill_in_deletes.
kill_in_deletes "$tmp/killed.txt" "$bin" api --data-dir "$data" --state-keep all=1s \
  --state-gc-batch 1 state prune --now +40d -v || fail "kill in the sweep: $(cat "$tmp/killed.txt")"
sort "$tmp/base.chunks" "$tmp/new.$s5" | uniq >"$tmp/want.chunks"
garbage=$(comm -13 "$tmp/want.chunks" "$tmp/c.before" | wc -l)
(( garbage >= junk_chunks && garbage > 200 )) || fail "only $garbage garbage chunks"
grep -q "deleted 0 of $garbage chunks" "$tmp/killed.txt" || fail "the sweep was to delete $garbage: $(cat "$tmp/killed.txt")"
chunks >"$tmp/c.killed"
killed_n=$(wc -l <"$tmp/c.killed")
(( killed_n < $(wc -l <"$tmp/c.before") && killed_n > $(wc -l <"$tmp/want.chunks") )) ||
  fail "kill -9 did not land in the deletes: $killed_n chunks, from $(wc -l <"$tmp/c.before") toward $(wc -l <"$tmp/want.chunks")"
comm -23 "$tmp/want.chunks" "$tmp/c.killed" | grep -q . && fail "the killed sweep deleted a referenced chunk"
start_api --autosave 0 --state-gc-interval 0
n=$(restore_all)
rsh main 'echo after the killed sweep >/workspace/gc/after' || fail "write after"
save_recorded "$tmp/base.chunks" "$tmp/new.$s5"
[[ $(json 'v["snapshot"]["changed_files"]' <"$tmp/save.json") == 1 ]] || fail "save after the killed sweep: $(cat "$tmp/save.json")"
ok "kill -9 of state prune in its deletes ($killed_n chunks left): the $n kept snapshots restore byte-exact; the next save works"

after1=$tmp/new.$snap

# --- kill -9 of the api in the middle of its own pass's deletes ---
# kill_in_deletes again, on the api's stderr with its per-step debug lines (one per delete
# batch, written before it).
rsh main 'head -c 24M /dev/urandom >/workspace/gc/junk' || fail "write junk 2"
save_recorded "$tmp/base.chunks" "$tmp/new.$s5" "$after1"
junk_chunks=$(wc -l <"$tmp/new.$snap")
rsh main 'rm /workspace/gc/junk' || fail "rm junk 2"
save_recorded "$tmp/base.chunks" "$tmp/new.$s5" "$after1"
stop_api
chunks >"$tmp/c.before"
# The api's own pass runs at the real time with --state-keep all=1s: every snapshot but the
# head must be over a second old by then, or it is kept (the junk save above was not).
sleep 1.2
COCOONBOX_LOG_LEVEL=debug kill_in_deletes "$tmp/killed2.txt" "$bin" api --data-dir "$data" \
  --listen "127.0.0.1:$port" --idle-hibernate 0 --autosave 0 --state-gc-interval 24h \
  --state-keep all=1s --state-gc-batch 1 || fail "kill in the api's sweep: $(cat "$tmp/killed2.txt")"
sort -u "$tmp/base.chunks" "$tmp/new.$s5" "$after1" >"$tmp/want.chunks"
garbage=$(comm -13 "$tmp/want.chunks" "$tmp/c.before" | wc -l)
(( garbage >= junk_chunks && garbage > 200 )) || fail "only $garbage garbage chunks"
grep -q "deleted 0 of $garbage chunks" "$tmp/killed2.txt" || fail "the api's sweep was to delete $garbage: $(cat "$tmp/killed2.txt")"
chunks >"$tmp/c.killed"
killed_n=$(wc -l <"$tmp/c.killed")
(( killed_n < $(wc -l <"$tmp/c.before") && killed_n > $(wc -l <"$tmp/want.chunks") )) ||
  fail "kill -9 did not land in the api's deletes: $killed_n chunks, from $(wc -l <"$tmp/c.before") toward $(wc -l <"$tmp/want.chunks")"
comm -23 "$tmp/want.chunks" "$tmp/c.killed" | grep -q . && fail "the killed api's sweep deleted a referenced chunk"
start_api --autosave 0 --state-gc-interval 0
n=$(restore_all)
rsh main 'echo after the killed api >/workspace/gc/after2' || fail "write after2"
save_recorded "$tmp/base.chunks" "$tmp/new.$s5" "$after1"
after2=$tmp/new.$snap
ok "kill -9 of the api in its own pass's deletes ($killed_n chunks left): the $n kept snapshots restore byte-exact; the next save works"

# --- the api's own pass, at start: one log line for the user; the leftovers go ---
stop_api
sleep 1.2  # past --state-keep all=1s for every snapshot but the head, as above
start_api --autosave 0 --state-gc-interval 24h --state-keep all=1s
for _ in $(seq 1 400); do grep -q '"msg":"state gc"' "$tmp/err" && break; sleep 0.05; done
grep '"msg":"state gc"' "$tmp/err" >"$tmp/gc.log" || fail "no state gc line from the api"
[[ $(json 'v["user"]' <"$tmp/gc.log") == u1 ]] || fail "gc line: $(cat "$tmp/gc.log")"
[[ $(json 'v["kept"]' <"$tmp/gc.log") == 1 ]] || fail "gc line kept: $(cat "$tmp/gc.log")"
(( $(json 'v["chunks_deleted"]' <"$tmp/gc.log") > 0 )) || fail "gc line: $(cat "$tmp/gc.log")"
sort -u "$tmp/base.chunks" "$tmp/new.$s5" "$after1" "$after2" >"$tmp/want.chunks"
chunks >"$tmp/got.chunks"
cmp -s "$tmp/want.chunks" "$tmp/got.chunks" || fail "after the api's pass: chunks differ from the head's"
n=$(restore_all)
ok "the api's pass at start removed the leftovers: $(json 'v["summary"]' <"$tmp/gc.log")"

echo "passed $passed"
