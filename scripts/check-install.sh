#!/usr/bin/env bash
# Install-and-consume test (CI runs it; needs cmake >= 3.20, a C/C++ compiler, pkg-config):
#   1. configure, build and `cmake --install` kvpool into a temporary prefix;
#   2. check the layout: the real library file (without debug info), the SONAME link (whose
#      name is the SONAME recorded in the file), the dev link, both headers, the CMake
#      package, pkg-config;
#   3. build cpp-examples/ against the prefix with find_package(kvpool 0.1 CONFIG) and run
#      its programs under ctest; check that an incompatible version request is refused;
#   4. MOVE the prefix and do 3 again from a fresh build directory (the package is
#      relocatable), then build and run a C program through pkg-config;
#   5. build two of cpp-examples' programs in a project that takes kvpool by
#      add_subdirectory (no install) and run them.
# Extra arguments go to kvpool's cmake configure. The cargo build reuses target/ (override
# with KVPOOL_CARGO_TARGET_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }
step() { printf '\n--- check-install: %s\n' "$*"; }

version=$(sed -n 's/^version = "\([0-9.]*\)"$/\1/p' Cargo.toml | head -1)
major=${version%%.*}
minor=$(echo "$version" | cut -d. -f2)
if [ "$major" = 0 ]; then soname=libkvpool.so.0.$minor; else soname=libkvpool.so.$major; fi

step "install kvpool $version"
cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DKVPOOL_CARGO_TARGET_DIR="${KVPOOL_CARGO_TARGET_DIR:-$root/target}" "$@"
cmake --build "$work/build"
cmake --install "$work/build" --prefix "$work/prefix"

step "layout"
lib=$work/prefix/lib
real=libkvpool.so.$version
[ -f "$lib/$real" ] && [ ! -L "$lib/$real" ] || fail "lib/$real is not a regular file"
[ "$(readlink "$lib/$soname")" = "$real" ] || fail "lib/$soname does not link to $real"
[ "$(readlink "$lib/libkvpool.so")" = "$soname" ] || fail "lib/libkvpool.so does not link to $soname"
readelf -d "$lib/$real" | grep -qF "Library soname: [$soname]" || fail "the SONAME is not $soname"
# Installed stripped (KVPOOL_INSTALL_STRIP, default ON); cargo's release build has debug info.
if readelf -S --wide "$lib/$real" | grep -qF .debug_info; then
  fail "lib/$real has debug info (.debug_info); it should be installed stripped"
fi
echo "lib/$real: no .debug_info, $(stat -c %s "$lib/$real") bytes"
for f in include/kvpool.h include/kvpool.hpp lib/cmake/kvpool/kvpoolConfig.cmake \
  lib/cmake/kvpool/kvpoolConfigVersion.cmake lib/pkgconfig/kvpool.pc; do
  [ -f "$work/prefix/$f" ] || fail "$f is not installed"
done
cmp -s include/kvpool.h "$work/prefix/include/kvpool.h" || fail "installed kvpool.h differs"
scripts/check-symbols.sh "$lib/$real"
find "$work/prefix" | sed "s|^$work/prefix|  <prefix>|" | sort

consume() { # prefix build-dir
  step "cpp-examples against $1"
  cmake -S cpp-examples -B "$2" -DCMAKE_PREFIX_PATH="$1" -DKVPOOL_EXAMPLES_WERROR=ON
  cmake --build "$2" -j "$(nproc 2>/dev/null || echo 2)"
  ctest --test-dir "$2" --output-on-failure
}
consume "$work/prefix" "$work/consumer"

step "version requests (SameMinorVersion while 0.x)"
mkdir "$work/want"
cat >"$work/want/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(want NONE)
find_package(kvpool ${WANT} CONFIG REQUIRED)
CMAKE
cmake -S "$work/want" -B "$work/want/ok" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DWANT="$major.$minor" >/dev/null || fail "find_package(kvpool $major.$minor) failed"
next="$major.$((minor + 1))"
if cmake -S "$work/want" -B "$work/want/next" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DWANT="$next" >/dev/null 2>&1; then
  fail "find_package(kvpool $next) accepted kvpool $version"
fi
echo "find_package(kvpool $major.$minor) found $version; find_package(kvpool $next) refused it"

mv "$work/prefix" "$work/moved"
consume "$work/moved" "$work/consumer-moved"

step "pkg-config (moved prefix)"
export PKG_CONFIG_PATH=$work/moved/lib/pkgconfig
[ "$(pkg-config --modversion kvpool)" = "$version" ] || fail "pkg-config --modversion"
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -std=c99 -Wall -Wextra -Werror $(pkg-config --cflags kvpool) cpp-examples/version_check.c \
  -o "$work/version_check" $(pkg-config --libs kvpool)
LD_LIBRARY_PATH=$work/moved/lib "$work/version_check"

step "in-tree: add_subdirectory(kvpool), no install"
mkdir "$work/in-tree"
cat >"$work/in-tree/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(in_tree LANGUAGES C CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
add_subdirectory("${KVPOOL_SOURCE}" kvpool)
add_executable(version_check "${KVPOOL_SOURCE}/cpp-examples/version_check.c")
target_link_libraries(version_check PRIVATE kvpool::kvpool)
target_compile_definitions(version_check PRIVATE KVPOOL_PACKAGE_VERSION="${KVPOOL_VERSION}")
add_executable(serving_loop "${KVPOOL_SOURCE}/cpp-examples/serving_loop.cpp")
target_link_libraries(serving_loop PRIVATE kvpool::kvpool)
CMAKE
cmake -S "$work/in-tree" -B "$work/in-tree/build" -DCMAKE_BUILD_TYPE=Release \
  -DKVPOOL_SOURCE="$root" -DKVPOOL_VERSION="$version" \
  -DKVPOOL_CARGO_TARGET_DIR="${KVPOOL_CARGO_TARGET_DIR:-$root/target}" >/dev/null
cmake --build "$work/in-tree/build" -j "$(nproc 2>/dev/null || echo 2)"
# No LD_LIBRARY_PATH: the build tree's RPATH must find the staged library.
env -u LD_LIBRARY_PATH "$work/in-tree/build/version_check"
env -u LD_LIBRARY_PATH "$work/in-tree/build/serving_loop" | tail -1 | grep -F "serving_loop: OK" ||
  fail "serving_loop built in-tree did not report OK"

echo
echo "check-install: OK (install, layout, find_package before and after moving the prefix, pkg-config, add_subdirectory)"
