#!/usr/bin/env bash
# Saves and restores of a running box, end to end on the local backend and the filesystem
# store (seed §25.6 steps 1-3, §22.5; issue 7 items 2-4): files written in the box through
# `cocoonbox rsh`, `cocoonbox save` twice with a change between, `cocoonbox snapshots` with
# changed files and added bytes, `cocoonbox browse`, `cocoonbox restore` of a path of the first
# save into ~/Restored/<save time>/ with the content it had then, refusals that name the field
# (a path outside the roots, "..", a target with "/"), a tampered chunk in the store failing the
# restore with DATA_LOSS naming the file and leaving nothing behind, and a second box of the
# same user uploading no chunk for a file the first box already saved.
# Usage: state.sh PATH_TO_COCOONBOX
source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
rsh() { local box=$1; shift; "$bin" rsh --box "$box" "$@"; }
cb() { "$bin" "$@"; }

start_api --autosave 0
cb login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
cb ensure >/dev/null 2>&1 || fail "ensure"
box_id=$(cb status --json | json 'v["id"]')
store=$data/state

# --- files in the box, older than the save's racy window (so the next save reuses them) ---
rsh main 'mkdir -p /workspace/t /home/user/Documents &&
  echo "file one" >/workspace/t/file-1 &&
  echo "file two, first version" >/workspace/t/file-2 &&
  seq 1 40000 >/workspace/t/numbers &&
  echo "a letter" >/home/user/Documents/letter.txt &&
  ln -sfn file-1 /workspace/t/link &&
  touch -h -d "1 hour ago" /workspace/t/* /home/user/Documents/letter.txt' || fail "write files"
sha2_v1=$(rsh main 'sha256sum /workspace/t/file-2' | cut -d' ' -f1)

cb save --json >"$tmp/save1.json" 2>"$tmp/save1.err" || fail "save 1: $(cat "$tmp/save1.err")"
snap1=$(json 'v["snapshot"]["id"]' <"$tmp/save1.json")
[[ $(json 'v["box_id"]' <"$tmp/save1.json") == "$box_id" ]] || fail "save 1 box: $(cat "$tmp/save1.json")"
(( $(json 'v["snapshot"]["files"]' <"$tmp/save1.json") >= 4 )) || fail "save 1 files: $(cat "$tmp/save1.json")"
(( $(json 'v["uploaded_chunks"]' <"$tmp/save1.json") >= 4 )) || fail "save 1 uploaded: $(cat "$tmp/save1.json")"
ls "$store/u1/boxes/$box_id/head" >/dev/null || fail "no head in the store"
ok "save 1: $snap1, $(json 'v["snapshot"]["files"]' <"$tmp/save1.json") files, $(json 'v["uploaded_chunks"]' <"$tmp/save1.json") chunks uploaded"

# --- change one file, add one, save again ---
rsh main 'echo "file two, second version, longer than the first" >/workspace/t/file-2 &&
  head -c 5000 /dev/urandom | od -An -tx1 >/workspace/t/file-3' || fail "change files"
size_new=$(rsh main 'cat /workspace/t/file-2 /workspace/t/file-3 | wc -c')
cb save --json >"$tmp/save2.json" 2>"$tmp/save2.err" || fail "save 2: $(cat "$tmp/save2.err")"
snap2=$(json 'v["snapshot"]["id"]' <"$tmp/save2.json")
[[ $snap2 > $snap1 ]] || fail "snapshot ids do not sort by time: $snap1 $snap2"
grep -q '^saving: .* read, [0-9]* chunks uploaded' "$tmp/save2.err" || fail "save 2 progress on stderr: $(cat "$tmp/save2.err")"
[[ $(json 'v["uploaded_chunks"]' <"$tmp/save2.json") == 2 ]] || fail "save 2 uploaded: $(cat "$tmp/save2.json")"
ok "save 2: $snap2"

# --- the timeline ---
cb snapshots --json >"$tmp/snaps.json" || fail "snapshots"
[[ $(json 'len(v)' <"$tmp/snaps.json") == 2 ]] || fail "snapshots: $(cat "$tmp/snaps.json")"
[[ $(json 'v[0]["id"]' <"$tmp/snaps.json") == "$snap2" ]] || fail "not newest first: $(cat "$tmp/snaps.json")"
[[ $(json 'v[1]["id"]' <"$tmp/snaps.json") == "$snap1" ]] || fail "snapshots: $(cat "$tmp/snaps.json")"
changed2=$(json 'v[0]["changed_files"]' <"$tmp/snaps.json")
added2=$(json 'v[0]["added_bytes"]' <"$tmp/snaps.json")
[[ $changed2 == 2 ]] || fail "save 2 changed $changed2 files, want 2: $(cat "$tmp/snaps.json")"
(( added2 == size_new )) || fail "save 2 added $added2 bytes, want $size_new (the two files)"
(( $(json 'v[1]["changed_files"]' <"$tmp/snaps.json") >= 4 )) || fail "save 1 changed: $(cat "$tmp/snaps.json")"
cb snapshots | grep -q "$snap1" || fail "snapshots table lacks $snap1"
ok "snapshots: two, newest first; the second changed $changed2 files and added $added2 bytes"

# --- browse ---
cb browse "$snap1" /workspace/t --json >"$tmp/browse.json" || fail "browse"
[[ $(json '[e["path"] for e in v]' <"$tmp/browse.json") == "['/workspace/t/file-1', '/workspace/t/file-2', '/workspace/t/link', '/workspace/t/numbers']" ]] ||
  fail "browse: $(cat "$tmp/browse.json")"
[[ $(json '[e for e in v if e["path"].endswith("/link")][0]["target"]' <"$tmp/browse.json") == file-1 ]] ||
  fail "browse symlink: $(cat "$tmp/browse.json")"
cb browse "$snap1" --json | grep -q '"/workspace"' || fail "browse of the top lacks /workspace"
out=$(cb browse "$snap1" /nowhere 2>&1) && fail "browse of a missing dir succeeded"
ok "browse lists one directory of a snapshot"

# --- restore a path of the first save ---
cb restore /workspace/t/file-2 --snapshot "$snap1" --json >"$tmp/restore.json" 2>"$tmp/restore.err" ||
  fail "restore: $(cat "$tmp/restore.err")"
grep -q '^restoring: 1 files, .* written, 1 chunks fetched' "$tmp/restore.err" ||
  fail "restore progress on stderr: $(cat "$tmp/restore.err")"
rpath=$(json 'v["path"]' <"$tmp/restore.json")
[[ $rpath == /home/user/Restored/20* ]] || fail "restored into $rpath"
got=$(rsh main "sha256sum '$rpath/workspace/t/file-2'" | cut -d' ' -f1)
[[ $got == "$sha2_v1" ]] || fail "restored file-2 has sha256 $got, want $sha2_v1"
[[ $(rsh main 'cat /workspace/t/file-2') == "file two, second version, longer than the first" ]] ||
  fail "the restore changed /workspace/t/file-2"
[[ $(rsh main "find '$rpath' -type f | wc -l") == 1 ]] || fail "restore wrote more than the path"
# A second restore of the same snapshot gets a -2 suffix; --at picks the snapshot by time.
at=$(json '"@%d.%03d" % divmod(v[1]["saved_at_ms"], 1000)' <"$tmp/snaps.json")
cb restore /workspace/t --at "$at" --json >"$tmp/restore2.json" || fail "restore --at"
[[ $(json 'v["path"]' <"$tmp/restore2.json") == "$rpath-2" ]] || fail "second restore: $(cat "$tmp/restore2.json")"
[[ $(rsh main "cat '$rpath-2/workspace/t/file-1'") == "file one" ]] || fail "folder restore content"
[[ $(rsh main "readlink '$rpath-2/workspace/t/link'") == file-1 ]] || fail "folder restore symlink"
cb restore /home/user/Documents --snapshot "$snap1" --target docs --json >/dev/null || fail "restore Documents"
[[ $(rsh main 'cat /home/user/Restored/docs/home/user/Documents/letter.txt') == "a letter" ]] || fail "Documents content"
ok "restore: file-2 of the first save in $rpath with its old sha256; folders, --at, --target"

# --- refusals (§25.4) ---
refuse() {
  local want=$1; shift
  if cb restore "$@" >"$tmp/refuse.out" 2>&1; then fail "restore $* succeeded"; fi
  grep -q -- "$want" "$tmp/refuse.out" || fail "restore $*: $(cat "$tmp/refuse.out"), want $want"
}
refuse 'paths\[0\].*outside /home/user and /workspace' /etc/passwd --snapshot "$snap1"
refuse 'paths\[0\].*"\.\."' /workspace/../etc/passwd --snapshot "$snap1"
refuse 'target.*contains' /workspace/t --snapshot "$snap1" --target a/b
refuse 'paths\[0\].*not in snapshot' /workspace/nothing-here --snapshot "$snap1"
refuse 'snapshot_id' /workspace/t --snapshot 20200101T000000.000Z-00000000
ok "restore refuses a path outside the roots, \"..\", a target with \"/\", a missing path or snapshot"

# --- a tampered chunk: DATA_LOSS naming the file, nothing left behind ---
# Save 3 stores the new file's chunks in one new pack (<store>/.packs/u1/<name>.pack); a byte
# flipped in every KiB of its objects tampers each of them.
packs() { ls "$store/.packs/u1" | grep '\.pack$' | sort; }
packs >"$tmp/packs.before"
rsh main 'head -c 100000 /dev/urandom >/workspace/t/tamper' || fail "write tamper"
cb save --json >"$tmp/save3.json" 2>/dev/null || fail "save 3"
snap3=$(json 'v["snapshot"]["id"]' <"$tmp/save3.json")
packs >"$tmp/packs.after"
new_pack=$(comm -13 "$tmp/packs.before" "$tmp/packs.after")
[[ -n $new_pack && $(wc -l <<<"$new_pack") == 1 ]] || fail "save 3 wrote packs '$new_pack'"
/usr/bin/python3 - "$store/.packs/u1/$new_pack" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
assert b[-8:] == b'CBPACK01', 'not a pack'
index_size = struct.unpack('<I', b[-20:-16])[0]  # footer: size, digest, magic
for i in range(512, len(b) - 20 - index_size, 1024):
    b[i] ^= 0x40
open(p, 'wb').write(bytes(b))
PY
before=$(rsh main 'ls -A /home/user/Restored | sort | tr "\n" " "')
if cb restore /workspace/t/tamper --snapshot "$snap3" >"$tmp/tamper.out" 2>&1; then fail "restore of a tampered chunk succeeded"; fi
grep -q 'DATA_LOSS' "$tmp/tamper.out" || fail "tamper: $(cat "$tmp/tamper.out")"
grep -q 'workspace/t/tamper' "$tmp/tamper.out" || fail "tamper does not name the file: $(cat "$tmp/tamper.out")"
after=$(rsh main 'ls -A /home/user/Restored | sort | tr "\n" " "')
[[ $before == "$after" ]] || fail "a failed restore left something: '$before' -> '$after'"
ok "a tampered chunk fails the restore with DATA_LOSS naming workspace/t/tamper; ~/Restored unchanged"

# --- a hibernate saves a changed box first, and only a changed one ---
cb snapshots --json >"$tmp/before_h.json"
rsh main 'echo "written before hibernating" >/workspace/t/file-4' || fail "write file-4"
cb hibernate >/dev/null 2>&1 || fail "hibernate"
cb snapshots --json >"$tmp/after_h.json"
[[ $(json 'len(v)' <"$tmp/after_h.json") == $(( $(json 'len(v)' <"$tmp/before_h.json") + 1 )) ]] ||
  fail "no save before hibernating: $(cat "$tmp/after_h.json")"
(( $(json 'v[0]["changed_files"]' <"$tmp/after_h.json") >= 1 )) || fail "hibernate save: $(cat "$tmp/after_h.json")"
cb ensure >/dev/null 2>&1 || fail "wake"
cb hibernate >/dev/null 2>&1 || fail "hibernate 2"
cb snapshots --json >"$tmp/after_h2.json"
[[ $(json 'len(v)' <"$tmp/after_h2.json") == $(json 'len(v)' <"$tmp/after_h.json") ]] ||
  fail "an unchanged box was saved again before hibernating: $(cat "$tmp/after_h2.json")"
ok "a hibernate saved the changed box first; an unchanged one was not saved again"

# --- a second box of the same user uploads nothing for content the first already saved ---
# (main stays hibernated: a user runs one box at a time by default)
cb box create second >"$tmp/create.out" 2>&1 || fail "box create second: $(cat "$tmp/create.out")"
cb save --box second --json >"$tmp/second0.json" 2>/dev/null || fail "save second (empty)"
rsh second 'mkdir -p /workspace/t && seq 1 40000 >/workspace/t/same-numbers' || fail "write in second"
cb save --box second --json >"$tmp/second.json" 2>/dev/null || fail "save second"
[[ $(json 'v["snapshot"]["changed_files"]' <"$tmp/second.json") == 1 ]] || fail "second: $(cat "$tmp/second.json")"
[[ $(json 'v["uploaded_chunks"]' <"$tmp/second.json") == 0 ]] ||
  fail "the second box uploaded chunks for content the first saved: $(cat "$tmp/second.json")"
[[ $(json 'v["snapshot"]["added_bytes"]' <"$tmp/second.json") == 0 ]] || fail "second added bytes: $(cat "$tmp/second.json")"
ok "a second box of the user saved a file the first box had: 0 chunks uploaded"

# --- restore on missing (§14.9 step 9): the machine and the files are gone behind the api's back ---
box2=$(cb status --box second --json | json 'v["id"]')
cb hibernate --box second >/dev/null 2>&1 || fail "hibernate second"
kill -9 "$(machine_pid "$box2")" 2>/dev/null || true
for _ in $(seq 1 100); do kill -0 "$(machine_pid "$box2")" 2>/dev/null || break; sleep 0.05; done
rm -rf "$data/boxes/$box2/home" "$data/boxes/$box2/workspace"
cb ensure --box second >"$tmp/ensure2.out" 2>"$tmp/ensure2.err" || fail "ensure after loss: $(cat "$tmp/ensure2.err")"
grep -q 'restored .* files from the last save' "$tmp/ensure2.err" ||
  fail "ensure did not report the restore: $(cat "$tmp/ensure2.err")"
grep -q 'loss window' "$tmp/ensure2.err" || fail "no loss window: $(cat "$tmp/ensure2.err")"
want=$(seq 1 40000 | sha256sum | cut -d' ' -f1)
got=$(rsh second 'sha256sum /workspace/t/same-numbers' | cut -d' ' -f1)
[[ $got == "$want" ]] || fail "the lost file came back as $got, want $want"
rsh second 'test ! -e /workspace/.cb-restore-whole && test ! -e /home/user/.cb-restore-whole' ||
  fail "the whole restore left its staging folder"
ok "a box whose machine and files were lost gets its last save back on ensure, with the loss window"

# --- the door's chunk batch routes take only a ticket of a save or restore in progress ---
door=$data/boxes/$box_id/run/model.sock
head -c 64 /dev/zero >"$tmp/two-ids"
for route in chunks/get chunks/put; do
  for ticket in "" "0123456789abcdef0123456789abcdef"; do
    code=$(curl -s -o "$tmp/door.out" -w '%{http_code}' --unix-socket "$door" \
      -H "x-cocoonbox-state-ticket: $ticket" --data-binary @"$tmp/two-ids" \
      "http://door/cocoonbox.state/v1/$route")
    [[ $code == 403 ]] || fail "$route with ticket '$ticket' answered $code: $(cat "$tmp/door.out")"
  done
done
ok "the door's chunk batch routes refuse requests without the ticket of a call in progress (403)"

# --- bad input at the CLI ---
if cb restore /workspace/t >/dev/null 2>&1; then fail "restore without --snapshot/--at succeeded"; fi
rc=0; cb restore /workspace/t --at yesterday >/dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "restore --at yesterday exited $rc, want 2"
ok "the CLI refuses restore without --snapshot or --at, and a bad --at (exit 2)"

echo "passed $passed"
