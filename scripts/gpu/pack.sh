#!/usr/bin/env bash
# Builds, on a machine with the Rust toolchain, everything the GPU check needs, into the
# git-ignored gpu-artifacts/ (the GPU machine has no Rust): the release library and the
# GPU test binaries. Then run scripts/gpu/run.sh on the GPU machine with gpu-artifacts/
# carried along (the device tool: carry ["gpu-artifacts"]).
set -euo pipefail
cd "$(dirname "$0")/../.."

scripts/build-kernels.sh --verify
cargo build --release --lib --example demo
rm -rf gpu-artifacts/bin gpu-artifacts/lib
mkdir -p gpu-artifacts/bin gpu-artifacts/lib
cp target/release/libkvpool.so gpu-artifacts/lib/
# Programs linked with -lkvpool record the SONAME; a copy, since links may not travel.
cp target/release/libkvpool.so gpu-artifacts/lib/libkvpool.so.0.1
cp target/release/examples/demo gpu-artifacts/bin/demo
# The test binaries, by name (cargo prints their paths as JSON).
cargo test --release --no-run --test cuda_lockstep --test cuda_device --message-format=json 2>/dev/null |
    python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    if msg.get("reason") == "compiler-artifact" and exe and msg["target"]["kind"] == ["test"]:
        shutil.copy(exe, "gpu-artifacts/bin/" + msg["target"]["name"])
        print("packed", msg["target"]["name"])
'
# Debug info is not needed there and would crowd the 64 MiB the device tool carries.
strip --strip-debug gpu-artifacts/bin/* gpu-artifacts/lib/*
ls -la gpu-artifacts/bin gpu-artifacts/lib
du -sh gpu-artifacts/bin gpu-artifacts/lib
