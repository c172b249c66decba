#!/usr/bin/env bash
# Runs the S3 store tests (s3_radosgw_test) against a real S3 server that verifies SigV4:
# Ceph's radosgw (Debian 12: ceph 16.2 "pacific"; scripts/setup installs radosgw, ceph-mon and
# ceph-osd). Pacific has no storage-free rgw backend (dbstore came in 17.2), so this starts a
# throwaway single-node cluster in a temp dir, all on 127.0.0.1 with free ports:
#   1 monitor (msgr v2, auth none), 1 OSD on memstore (RAM, no disk image), radosgw (beast) with
#   an http and an https endpoint (a self-signed certificate for IP 127.0.0.1),
# creates a user and a bucket, runs the test binary, then stops every daemon and deletes the
# dir. About 15 s to start on this machine.
#
#   test/state/run_s3.sh BUILD/test/state/s3_radosgw_test [catch2 args...]
#   test/state/run_s3.sh --shell    # start, print the environment, wait for Enter, clean up
set -euo pipefail

binary=${1:?usage: run_s3.sh TEST_BINARY [args] | --shell}
shift
for tool in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph curl openssl python3; do
  command -v "$tool" >/dev/null || {
    echo "run_s3: $tool is missing (scripts/setup installs radosgw ceph-mon ceph-osd)" >&2
    exit 1
  }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/cb-s3-XXXXXX")
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if ((status != 0)) && [[ -d $dir/log ]]; then
    echo "run_s3: failed; the last lines of the daemons' logs:" >&2
    for f in "$dir"/log/*.log; do echo "== $f" >&2; tail -n 15 "$f" >&2; done
  fi
  rm -rf "$dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
mon_port=$(free_port)
rgw_port=$(free_port)
tls_port=$(free_port)
fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
mkdir -p "$dir"/{run,log,mon,osd,rgw}
conf=$dir/ceph.conf

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null

cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$mon_port]
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
mon data = $dir/mon/\$name
osd data = $dir/osd/\$name
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 1
osd objectstore = memstore
memstore device bytes = 1073741824
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port ssl_endpoint=127.0.0.1:$tls_port ssl_certificate=$dir/tls.crt ssl_private_key=$dir/tls.key
rgw data = $dir/rgw
EOF

# Each daemon runs in the foreground (-f) as our child, so its pid is ours to stop.
monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap"
ceph-mon -c "$conf" -i a -f >>"$dir/log/daemons.log" 2>&1 &
pids+=($!)
osd_id=$(timeout 60 ceph -c "$conf" --connect-timeout 30 osd create)
mkdir -p "$dir/osd/osd.$osd_id"
ceph-osd -c "$conf" -i "$osd_id" --mkfs 2>>"$dir/log/daemons.log"
ceph-osd -c "$conf" -i "$osd_id" -f >>"$dir/log/daemons.log" 2>&1 &
pids+=($!)
radosgw -c "$conf" -n client.rgw -f >>"$dir/log/daemons.log" 2>&1 &
pids+=($!)

endpoint=http://127.0.0.1:$rgw_port
for i in $(seq 600); do
  if curl -s -o /dev/null -m 2 "$endpoint/"; then break; fi
  if ((i == 600)); then echo "run_s3: radosgw did not answer within 60 s" >&2; exit 1; fi
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || { echo "run_s3: a ceph daemon exited" >&2; exit 1; }
  done
  sleep 0.1
done

access_key=CBTEST$(python3 -c 'import secrets; print(secrets.token_hex(7).upper())')
secret=$(python3 -c 'import secrets; print(secrets.token_urlsafe(30))')
(umask 077 && printf '%s\n' "$secret" >"$dir/secret")
radosgw-admin -c "$conf" user create --uid cbtest --display-name cbtest \
  --access-key "$access_key" --secret-key "$secret" >/dev/null 2>>"$dir/log/daemons.log"
bucket=cb-state-test
# curl 7.88's --aws-sigv4 signs x-amz-content-sha256 only when given; credentials on stdin,
# never in argv.
code=$(printf 'user = "%s:%s"\n' "$access_key" "$secret" |
  curl -sS -K - -o "$dir/bucket.out" -w '%{http_code}' -X PUT "$endpoint/$bucket" \
    --aws-sigv4 "aws:amz:us-east-1:s3" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
if [[ $code != 200 ]]; then
  echo "run_s3: creating the bucket answered $code: $(cat "$dir/bucket.out")" >&2
  exit 1
fi

export CB_S3_ENDPOINT=$endpoint
export CB_S3_TLS_ENDPOINT=https://127.0.0.1:$tls_port
export CB_S3_CA_FILE=$dir/tls.crt
export CB_S3_BUCKET=$bucket
export CB_S3_ACCESS_KEY=$access_key
export CB_S3_SECRET_FILE=$dir/secret

if [[ $binary == --shell ]]; then
  env | grep '^CB_S3_'
  echo "run_s3: radosgw is up; press Enter to stop it" >&2
  read -r _
  exit 0
fi
"$binary" "$@"
