#!/usr/bin/env bash
# Fails when an include crosses a layer the architecture forbids (house style H2, H15):
#  - src/ never includes roles/;
#  - a role never includes another role;
#  - generated protobuf headers (*.pb.h, *.cbgrpc.h) only in src/grpc/ and roles/.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
bad=0
while IFS= read -r line; do
  echo "layering: src/ includes a role: $line" >&2; bad=1
done < <(grep -rnE '#include "roles/' src || true)
for dir in roles/*/; do
  role=$(basename "$dir")
  while IFS= read -r line; do
    echo "layering: role $role includes another role: $line" >&2; bad=1
  done < <(grep -rnE '#include "roles/' "$dir" | grep -v "#include \"roles/$role/" || true)
done
while IFS= read -r line; do
  echo "layering: generated protobuf header outside grpc/ and roles/: $line" >&2; bad=1
done < <(grep -rnE '#include ".*\.(pb|cbgrpc)\.h"' src | grep -v '^src/grpc/' || true)
if ((bad)); then exit 1; fi
echo "layering: ok"
