#!/usr/bin/env bash
# Formats every C++ file we own with the repo's .clang-format; --check only reports.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -- '*.h' '*.cc' | grep -v '^third_party/')
if [[ ${1:-} == --check ]]; then
  clang-format --dry-run -Werror "${files[@]}"
  echo "format: ok (${#files[@]} files)"
else
  clang-format -i "${files[@]}"
fi
