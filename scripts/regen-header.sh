#!/usr/bin/env bash
# Regenerates include/kvpool.h from src/ffi/ with the pinned cbindgen; pass --verify to
# check instead of write (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
want="0.29.4"
have=$(cbindgen --version 2>/dev/null | awk '{print $2}')
if [ "$have" != "$want" ]; then
  echo "cbindgen $want required (found: ${have:-none}); cargo install cbindgen --version $want --locked" >&2
  exit 1
fi
cbindgen --quiet --config cbindgen.toml --output include/kvpool.h "$@"
