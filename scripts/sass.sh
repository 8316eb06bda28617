#!/usr/bin/env bash
# The kernels' SASS on a machine without a GPU or a CUDA toolkit: cuobjdump and nvdisasm from
# NVIDIA's pip wheels (pinned below; fetched once into target/sass-tools, ~60 MB), for the
# checks BENCHMARKS.md reports ("by cuobjdump -sass only kvp_X differs from main's") without
# spending device time on them.
#
#   scripts/sass.sh dump [--arch sm_90] [--fun NAME] [FATBIN]   SASS of every function, or of NAME
#   scripts/sass.sh diff [--arch sm_90] OLD NEW                 the functions whose SASS differs
#
# FATBIN defaults to kernels/pool.fatbin; any file cuobjdump reads works (a cubin from
# `nvcc -cubin -arch sm_90 kernels/pool.cu`, a fatbin of another revision:
# `git show REV:kernels/pool.fatbin > /tmp/old.fatbin`). `diff` compares instructions only
# (addresses and encodings left out, so branch targets still count: a moved block is a
# difference) and names the functions found in one file alone.
set -euo pipefail
cd "$(dirname "$0")/.."

CUOBJDUMP_WHEEL=nvidia-cuda-cuobjdump==13.2.78
NVDISASM_WHEEL=nvidia-cuda-nvdisasm==13.2.78
TOOLS=$PWD/target/sass-tools

tools() {
    if [[ ! -x $TOOLS/bin/cuobjdump || ! -x $TOOLS/bin/nvdisasm ]]; then
        rm -rf "$TOOLS" && mkdir -p "$TOOLS/bin" "$TOOLS/wheels"
        python3 -m pip download --quiet --no-deps -d "$TOOLS/wheels" \
            "$CUOBJDUMP_WHEEL" "$NVDISASM_WHEEL" >&2
        local wheel tool
        for wheel in "$TOOLS"/wheels/*.whl; do
            python3 -m zipfile -e "$wheel" "$TOOLS/unpacked"
        done
        for tool in cuobjdump nvdisasm; do
            # (cuobjdump runs nvdisasm from its own folder or PATH)
            cp "$(find "$TOOLS/unpacked" -type f -name "$tool" | head -1)" "$TOOLS/bin/$tool"
            chmod +x "$TOOLS/bin/$tool"
        done
    fi
    export PATH=$TOOLS/bin:$PATH
}

usage() {
    sed -n '7,8p' "$0" >&2
    exit 2
}

cmd=${1:-}
[[ $cmd == dump || $cmd == diff ]] || usage
shift
arch=sm_90
fun=()
while [[ $# -gt 0 && $1 == --* ]]; do
    case $1 in
        --arch) arch=$2; shift 2 ;;
        --fun) fun=(-fun "$2"); shift 2 ;;
        *) usage ;;
    esac
done
if [[ $cmd == dump ]]; then
    [[ $# -le 1 ]] || usage
    tools
    cuobjdump -sass -arch "$arch" "${fun[@]}" "${1:-kernels/pool.fatbin}"
    exit
fi

[[ $# -eq 2 ]] || usage
tools
old=$(mktemp) new=$(mktemp)
trap 'rm -f "$old" "$new"' EXIT
cuobjdump -sass -arch "$arch" "$1" > "$old"
cuobjdump -sass -arch "$arch" "$2" > "$new"
python3 - "$old" "$new" <<'EOF'
import re, sys

def functions(path):
    """{name: [instruction text]} of a cuobjdump -sass listing."""
    found, name = {}, None
    for line in open(path):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            found[name] = []
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;", line)
        if m and name is not None:
            found[name].append(m.group(1))
    return found

old, new = functions(sys.argv[1]), functions(sys.argv[2])
changed = sorted(n for n in old.keys() & new.keys() if old[n] != new[n])
for n in changed:
    print(f"differs: {n} ({len(old[n])} -> {len(new[n])} instructions)")
for n in sorted(old.keys() - new.keys()):
    print(f"only in the old: {n}")
for n in sorted(new.keys() - old.keys()):
    print(f"only in the new: {n}")
same = len(old.keys() & new.keys()) - len(changed)
print(f"{same} functions the same, {len(changed)} differ")
EOF
