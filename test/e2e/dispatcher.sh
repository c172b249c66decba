#!/usr/bin/env bash
# The cocoonbox dispatcher as a user meets it: --version, --help, unknown commands and role
# links, exit codes. Usage: dispatcher.sh PATH_TO_COCOONBOX
set -euo pipefail
bin=$(readlink -f "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$bin" --version) || fail "--version exited $?"
[[ $out =~ ^cocoonbox\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "--version printed '$out'"

help=$("$bin" --help) || fail "--help exited $?"
grep -q "Usage:" <<<"$help" || fail "--help has no usage"
# --help lists exactly the roles the binary has.
while read -r role; do
  [[ -z $role ]] && continue
  grep -qE "^  $role " <<<"$help" || fail "--help does not list role $role"
done < <("$bin" --list-roles)

set +e
"$bin" no-such-role >/dev/null 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 2 ]] || fail "unknown command exited $rc, want 2"
grep -q 'unknown command "no-such-role"' "$tmp/err" || fail "unknown command message: $(cat "$tmp/err")"

set +e
"$bin" >/dev/null 2>&1; rc=$?
set -e
[[ $rc == 2 ]] || fail "no arguments exited $rc, want 2"

ln -s "$bin" "$tmp/cocoonbox-nosuchrole"
set +e
"$tmp/cocoonbox-nosuchrole" 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 2 ]] || fail "link to an unknown role exited $rc, want 2"
grep -q 'no role "nosuchrole"' "$tmp/err" || fail "link message: $(cat "$tmp/err")"

file -L "$bin" | grep -q "statically linked" || echo "note: $bin is not static (sanitizer build?)"
echo "1 passed, 0 failed"
