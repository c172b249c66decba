#!/usr/bin/env bash
# Saves and restores of a running box through an S3 store, end to end (issue 7 items 1-2; seed
# §22.5, §25.4): the api runs with --state-store s3://... against a real radosgw that checks
# SigV4 (started by test/state/run_s3.sh on loopback), the box's agent PUTs and GETs chunks
# through S3 presigned URLs the api hands out, and no chunk byte passes through the api.
# Two saves (the second uploads only the changed chunks), a byte-exact restore of a file of the
# first save, a second box of the same user that uploads 0 chunks for content the first one
# saved, and an object tampered in the bucket failing the restore with DATA_LOSS naming the
# file. Every save and restore logs relayed_bytes 0: the door's object routes carried nothing.
# Skips (exit 77) only when radosgw is not installed (scripts/setup installs it).
# Usage: state_s3.sh PATH_TO_COCOONBOX
set -euo pipefail
if [[ -z ${CB_S3_ENDPOINT:-} ]]; then
  for tool in radosgw ceph-mon ceph-osd; do
    if ! command -v "$tool" >/dev/null; then
      echo "SKIP: $tool is not installed (scripts/setup installs radosgw ceph-mon ceph-osd)"
      exit 77
    fi
  done
  # run_s3.sh starts the cluster, exports CB_S3_*, runs this script again and cleans up.
  exec "$(dirname "$0")/../state/run_s3.sh" "$(readlink -f "$0")" "$@"
fi

source "$(dirname "$0")/lib.sh" "$1"
export XDG_CONFIG_HOME=$tmp/config
rsh() { local box=$1; shift; "$bin" rsh --box "$box" "$@"; }
cb() { "$bin" "$@"; }
prefix=e2e$RANDOM
url="s3://$CB_S3_BUCKET/$prefix?endpoint=$CB_S3_ENDPOINT&access_key=$CB_S3_ACCESS_KEY&secret_file=$CB_S3_SECRET_FILE"

# S3 requests of the test itself (listing, tampering): a small SigV4 client; the secret is
# read from its file, never put in argv.
#   s3 GET|PUT KEY [FILE]   GET writes the object to FILE, PUT sends FILE
#   s3 LIST PREFIX          the keys under PREFIX, one a line, sorted
cat >"$tmp/s3.py" <<'PY'
import datetime, hashlib, hmac, os, re, sys, urllib.parse, urllib.request
op, arg = sys.argv[1], sys.argv[2]
endpoint, bucket = os.environ["CB_S3_ENDPOINT"], os.environ["CB_S3_BUCKET"]
access = os.environ["CB_S3_ACCESS_KEY"]
secret = open(os.environ["CB_S3_SECRET_FILE"]).read().strip()
host = urllib.parse.urlparse(endpoint).netloc
q = lambda s: urllib.parse.quote(s, safe="-_.~")
if op == "LIST":
    method, path, query, body = "GET", "/" + bucket, {"list-type": "2", "max-keys": "1000", "prefix": arg}, b""
else:
    method, path, query = op, "/%s/%s" % (bucket, urllib.parse.quote(arg, safe="/-_.~")), {}
    body = open(sys.argv[3], "rb").read() if op == "PUT" else b""
now = datetime.datetime.utcnow()
amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
payload = hashlib.sha256(body).hexdigest()
cq = "&".join("%s=%s" % (q(k), q(v)) for k, v in sorted(query.items()))
headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
signed = ";".join(sorted(headers))
creq = "\n".join([method, path, cq] + ["%s:%s" % (k, headers[k]) for k in sorted(headers)] + ["", signed, payload])
scope = "%s/us-east-1/s3/aws4_request" % day
sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
key = ("AWS4" + secret).encode()
for part in (day, "us-east-1", "s3", "aws4_request"):
    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
headers["authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (access, scope, signed, sig)
req = urllib.request.Request(endpoint + path + ("?" + cq if cq else ""), data=body if op == "PUT" else None,
                             method=method, headers={k: v for k, v in headers.items() if k != "host"})
data = urllib.request.urlopen(req).read()
if op == "LIST":
    print("\n".join(sorted(re.findall(r"<Key>([^<]*)</Key>", data.decode()))))
elif op == "GET":
    open(sys.argv[3], "wb").write(data)
PY
s3() { /usr/bin/python3 "$tmp/s3.py" "$@"; }
s3_keys() { s3 LIST "$1"; }

# --- flags: both stores named is an error naming both; a wrong secret fails the start ---
if "$bin" api --data-dir "$tmp/both" --listen 127.0.0.1:0 --state-dir "$tmp/sd" \
  --state-store "$url" >"$tmp/both.out" 2>&1; then
  fail "the api started with --state-dir and --state-store"
fi
grep -q -- '--state-store' "$tmp/both.out" && grep -q -- '--state-dir' "$tmp/both.out" ||
  fail "the refusal does not name both flags: $(cat "$tmp/both.out")"
(umask 077 && echo wrong-secret >"$tmp/wrong-secret")
bad_url="s3://$CB_S3_BUCKET/$prefix?endpoint=$CB_S3_ENDPOINT&access_key=$CB_S3_ACCESS_KEY&secret_file=$tmp/wrong-secret"
if "$bin" api --data-dir "$tmp/bad" --listen 127.0.0.1:0 --state-store "$bad_url" >"$tmp/bad.out" 2>&1; then
  fail "the api started with a wrong S3 secret"
fi
grep -q 'HEAD bucket.*403' "$tmp/bad.out" || fail "wrong secret: $(cat "$tmp/bad.out")"
ok "--state-dir with --state-store is refused naming both; a wrong secret fails the start"

start_api --autosave 0 --state-store "$url"
grep -q '"state store"' "$tmp/err" || fail "the api does not log its state store"
cb login --endpoint "http://127.0.0.1:$port" --token - <"$data/admin.token" >/dev/null
cb ensure >/dev/null 2>&1 || fail "ensure"
box_id=$(cb status --json | json 'v["id"]')

# --- two saves ---
rsh main 'mkdir -p /workspace/t /home/user/Documents &&
  echo "file one" >/workspace/t/file-1 &&
  echo "file two, first version" >/workspace/t/file-2 &&
  seq 1 40000 >/workspace/t/numbers &&
  head -c 300000 /dev/urandom >/workspace/t/random.bin &&
  echo "a letter" >/home/user/Documents/letter.txt &&
  touch -h -d "1 hour ago" /workspace/t/* /home/user/Documents/letter.txt' || fail "write files"
sha2_v1=$(rsh main 'sha256sum /workspace/t/file-2' | cut -d' ' -f1)
sha_random=$(rsh main 'sha256sum /workspace/t/random.bin' | cut -d' ' -f1)

cb save --json >"$tmp/save1.json" 2>"$tmp/save1.err" || fail "save 1: $(cat "$tmp/save1.err")"
snap1=$(json 'v["snapshot"]["id"]' <"$tmp/save1.json")
up1=$(json 'v["uploaded_chunks"]' <"$tmp/save1.json")
(( up1 >= 5 )) || fail "save 1 uploaded $up1 chunks: $(cat "$tmp/save1.json")"
[[ ! -e $data/state ]] || fail "the api made a filesystem store at $data/state"
s3_keys "$prefix/u1/" >"$tmp/keys1"
grep -qx "$prefix/u1/boxes/$box_id/head" "$tmp/keys1" || fail "no head in the bucket: $(cat "$tmp/keys1")"
grep -qx "$prefix/u1/boxes/$box_id/snapshots/$snap1.manifest" "$tmp/keys1" || fail "no manifest in the bucket"
[[ $(grep -c "^$prefix/u1/chunks/" "$tmp/keys1") == "$up1" ]] ||
  fail "save 1 uploaded $up1 chunks, the bucket holds $(grep -c "^$prefix/u1/chunks/" "$tmp/keys1")"
ok "save 1: $snap1, $up1 chunks uploaded into s3://$CB_S3_BUCKET/$prefix/u1/chunks/"

rsh main 'echo "file two, second version, longer than the first" >/workspace/t/file-2 &&
  head -c 5000 /dev/urandom | od -An -tx1 >/workspace/t/file-3' || fail "change files"
cb save --json >"$tmp/save2.json" 2>"$tmp/save2.err" || fail "save 2: $(cat "$tmp/save2.err")"
snap2=$(json 'v["snapshot"]["id"]' <"$tmp/save2.json")
[[ $(json 'v["uploaded_chunks"]' <"$tmp/save2.json") == 2 ]] || fail "save 2 uploaded: $(cat "$tmp/save2.json")"
[[ $(json 'v["snapshot"]["changed_files"]' <"$tmp/save2.json") == 2 ]] || fail "save 2 changed: $(cat "$tmp/save2.json")"
cb snapshots --json >"$tmp/snaps.json" || fail "snapshots"
[[ $(json '[s["id"] for s in v]' <"$tmp/snaps.json") == "['$snap2', '$snap1']" ]] || fail "snapshots: $(cat "$tmp/snaps.json")"
cb browse "$snap1" /workspace/t --json | grep -q '/workspace/t/random.bin' || fail "browse through the S3 store"
ok "save 2: $snap2 uploaded the 2 changed chunks; snapshots and browse read the bucket"

# --- restore byte-exact ---
cb restore /workspace/t --snapshot "$snap1" --json >"$tmp/restore.json" 2>"$tmp/restore.err" ||
  fail "restore: $(cat "$tmp/restore.err")"
rpath=$(json 'v["path"]' <"$tmp/restore.json")
[[ $(rsh main "sha256sum '$rpath/workspace/t/file-2'" | cut -d' ' -f1) == "$sha2_v1" ]] ||
  fail "restored file-2 differs from the first save's"
[[ $(rsh main "sha256sum '$rpath/workspace/t/random.bin'" | cut -d' ' -f1) == "$sha_random" ]] ||
  fail "restored random.bin differs"
[[ $(rsh main 'cat /workspace/t/file-2') == "file two, second version, longer than the first" ]] ||
  fail "the restore changed /workspace/t/file-2"
ok "restore: the first save's file-2 and random.bin came back byte-exact in $rpath"

# --- a quiesced save: the agent's database goes with the files ---
cb save --quiesce --json >"$tmp/saveq.json" 2>"$tmp/saveq.err" || fail "save --quiesce: $(cat "$tmp/saveq.err")"
[[ $(json 'v["snapshot"]["quiesced"]' <"$tmp/saveq.json") == True ]] || fail "save --quiesce: $(cat "$tmp/saveq.json")"
snapq=$(json 'v["snapshot"]["id"]' <"$tmp/saveq.json")
cb snapshots --json >"$tmp/snapsq.json" || fail "snapshots"
[[ $(json '[s["quiesced"] for s in v if s["id"] == "'"$snapq"'"]' <"$tmp/snapsq.json") == "[True]" ]] ||
  fail "snapshots does not report $snapq quiesced: $(cat "$tmp/snapsq.json")"
[[ $(json '[s["quiesced"] for s in v if s["id"] == "'"$snap2"'"]' <"$tmp/snapsq.json") == "[False]" ]] ||
  fail "a plain save reported quiesced: $(cat "$tmp/snapsq.json")"
cb browse "$snapq" /agent --json | grep -q '"/agent/agent.db"' || fail "the quiesced save lacks agent/agent.db"
ok "save --quiesce: $snapq is quiesced in snapshots and holds agent/agent.db"

# --- a second box of the user uploads nothing for content the first box saved ---
cb hibernate >/dev/null 2>&1 || fail "hibernate main"
cb box create second >"$tmp/create.out" 2>&1 || fail "box create second: $(cat "$tmp/create.out")"
rsh second 'mkdir -p /workspace/t && seq 1 40000 >/workspace/t/same-numbers' || fail "write in second"
cb save --box second --json >"$tmp/second.json" 2>/dev/null || fail "save second"
[[ $(json 'v["snapshot"]["changed_files"]' <"$tmp/second.json") == 1 ]] || fail "second: $(cat "$tmp/second.json")"
[[ $(json 'v["uploaded_chunks"]' <"$tmp/second.json") == 0 ]] ||
  fail "the second box uploaded chunks for content the first saved: $(cat "$tmp/second.json")"
ok "a second box of the user saved a file the first box had: 0 chunks uploaded"

# --- an object tampered in the bucket: DATA_LOSS naming the file, nothing left behind ---
cb hibernate --box second >/dev/null 2>&1 || fail "hibernate second"
cb ensure >/dev/null 2>&1 || fail "wake main"
s3_keys "$prefix/u1/chunks/" >"$tmp/chunks.before"
rsh main 'head -c 100000 /dev/urandom >/workspace/t/tamper' || fail "write tamper"
cb save --json >"$tmp/save3.json" 2>/dev/null || fail "save 3"
snap3=$(json 'v["snapshot"]["id"]' <"$tmp/save3.json")
s3_keys "$prefix/u1/chunks/" >"$tmp/chunks.after"
new_chunk=$(comm -13 "$tmp/chunks.before" "$tmp/chunks.after" | head -1)
[[ -n $new_chunk ]] || fail "save 3 stored no chunk"
s3 GET "$new_chunk" "$tmp/chunk" || fail "get $new_chunk"
/usr/bin/python3 - "$tmp/chunk" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[len(b) // 2] ^= 0x40
open(p, 'wb').write(bytes(b))
PY
s3 PUT "$new_chunk" "$tmp/chunk" || fail "put $new_chunk"
before=$(rsh main 'ls -A /home/user/Restored | sort | tr "\n" " "')
if cb restore /workspace/t/tamper --snapshot "$snap3" >"$tmp/tamper.out" 2>&1; then
  fail "restore of a tampered chunk succeeded"
fi
grep -q 'DATA_LOSS' "$tmp/tamper.out" || fail "tamper: $(cat "$tmp/tamper.out")"
grep -q 'workspace/t/tamper' "$tmp/tamper.out" || fail "tamper does not name the file: $(cat "$tmp/tamper.out")"
after=$(rsh main 'ls -A /home/user/Restored | sort | tr "\n" " "')
[[ $before == "$after" ]] || fail "a failed restore left something: '$before' -> '$after'"
ok "an object tampered in the bucket fails the restore with DATA_LOSS naming workspace/t/tamper"

# --- the api relayed no chunk bytes: every save and restore says relayed_bytes 0 ---
# check_relayed MIN_SAVES MIN_RESTORES
check_relayed() {
  /usr/bin/python3 - "$tmp/err" "$1" "$2" <<'PY' || fail "the api's log: chunk bytes went through the api"
import json, sys
saves = restores = 0
for line in open(sys.argv[1]):
    try:
        rec = json.loads(line)
    except ValueError:
        continue
    msg = rec.get("msg")
    if msg in ("state saved", "state restored"):
        if rec.get("relayed_bytes") != 0:
            sys.exit("relayed: " + line)
        saves += msg == "state saved"
        restores += msg == "state restored"
if saves < int(sys.argv[2]) or restores < int(sys.argv[3]):
    sys.exit("found %d saves and %d restores in the log" % (saves, restores))
PY
}
check_relayed 4 1
ok "the api's log: every save and restore relayed 0 bytes (chunks went agent <-> S3)"

# Restarts the api on store URL $1, then saves a new random file /workspace/t/$2 through the box
# and restores it byte for byte ($3 names the case in failures).
save_restore_over() {
  local url=$1 name=$2 what=$3 sha snap rpath
  kill_api
  start_api --autosave 0 --state-store "$url"
  rsh main "head -c 70000 /dev/urandom >/workspace/t/$name" || fail "write $name"
  sha=$(rsh main "sha256sum /workspace/t/$name" | cut -d' ' -f1)
  cb save --json >"$tmp/save-$name.json" 2>"$tmp/save-$name.err" ||
    fail "save $what: $(cat "$tmp/save-$name.err")"
  snap=$(json 'v["snapshot"]["id"]' <"$tmp/save-$name.json")
  (( $(json 'v["uploaded_chunks"]' <"$tmp/save-$name.json") >= 1 )) ||
    fail "save $what: $(cat "$tmp/save-$name.json")"
  cb restore "/workspace/t/$name" --snapshot "$snap" --json >"$tmp/restore-$name.json" \
    2>"$tmp/restore-$name.err" || fail "restore $what: $(cat "$tmp/restore-$name.err")"
  rpath=$(json 'v["path"]' <"$tmp/restore-$name.json")
  [[ $(rsh main "sha256sum '$rpath/workspace/t/$name'" | cut -d' ' -f1) == "$sha" ]] ||
    fail "the file restored $what differs"
}

# --- the same store over https: the api and the agent trust the endpoint's own CA ---
s3_base="s3://$CB_S3_BUCKET/$prefix?endpoint=$CB_S3_TLS_ENDPOINT&access_key=$CB_S3_ACCESS_KEY&secret_file=$CB_S3_SECRET_FILE"
save_restore_over "$s3_base&ca_file=$CB_S3_CA_FILE" over-https "over https"
check_relayed 1 1
ok "over https (the endpoint's own CA, handed to the agent): a save and a byte-exact restore"

# --- over https with verify=0 and no ca_file: the agent checks the endpoint as little as the api ---
save_restore_over "$s3_base&verify=0" unverified "with verify=0"
ok "over https with verify=0 and no ca_file: the agent follows the URLs too (save, byte-exact restore)"

echo "passed $passed"
