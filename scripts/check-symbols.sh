#!/usr/bin/env bash
# Compares the dynamic symbols a built libkvpool.so defines (`nm -D --defined-only`) with
# abi/kvpool.symbols, the committed list of kvpool's exports. Any difference fails: an
# export added, removed or renamed is an ABI change and must be made on purpose, with the
# list updated in the same commit (`scripts/check-symbols.sh --update`).
#
# Usage: scripts/check-symbols.sh [--update] [LIB]   (LIB: target/release/libkvpool.so,
# a release build without the test-only `testing` feature)
set -euo pipefail
cd "$(dirname "$0")/.."
update=false
if [ "${1:-}" = "--update" ]; then
  update=true
  shift
fi
lib=${1:-target/release/libkvpool.so}
list=abi/kvpool.symbols
[ -f "$lib" ] || { echo "check-symbols: $lib not found (cargo build --release)" >&2; exit 1; }

exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | LC_ALL=C sort)
if $update; then
  {
    echo "# Dynamic symbols of libkvpool.so (nm -D --defined-only), one per line, sorted."
    echo "# Checked by scripts/check-symbols.sh (CI) and tests/ffi_programs.rs; regenerate"
    echo "# with scripts/check-symbols.sh --update when the ABI changes on purpose."
    echo "$exported"
  } >"$list"
  echo "check-symbols: wrote $(echo "$exported" | wc -l) symbols to $list"
  exit 0
fi
if ! diff -u --label "$list" --label "$lib" <(grep -v '^#' "$list") <(echo "$exported"); then
  echo "check-symbols: the exports of $lib differ from $list (+ exported, not listed;" \
    "- listed, not exported). If the ABI change is intended: scripts/check-symbols.sh --update" >&2
  exit 1
fi
echo "check-symbols: the $(echo "$exported" | wc -l) exports of $lib match $list"
