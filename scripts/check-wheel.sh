#!/usr/bin/env bash
# The Python wheel (pyproject.toml, setup.py), as a user gets it: built by pip from this
# checkout (setuptools fetched, pinned, into pip's isolated build environment), its
# manylinux tag (against auditwheel) and contents checked, installed into a fresh virtual
# environment, then imported from outside the checkout without $KVPOOL_LIB and called on the
# library it carries; then an editable install (`pip install -e .`) and an install from the
# repository's URL (`pip install git+file://...` of HEAD) in environments of their own.
# Leaves the checkout as it found it (setuptools' scratch folders go under the ignored
# target/).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

version=$(sed -n 's/^version = "\([0-9.]*\)"$/\1/p' Cargo.toml | head -1)
[[ -n "$version" ]] || { echo "no version in Cargo.toml" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
before=$(git status --porcelain)

python3 -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/dist" .

shopt -s nullglob
wheels=("$work"/dist/kvpool-"$version"-py3-none-manylinux_*_"$(uname -m)".whl)
shopt -u nullglob
if [[ ${#wheels[@]} -ne 1 ]]; then
    echo "expected one kvpool-$version-py3-none-manylinux_*_$(uname -m).whl; pip wrote:" >&2
    ls "$work/dist" >&2
    exit 1
fi
wheel=${wheels[0]}

# The manylinux tag setup.py gave it must be the one auditwheel (pinned, with its
# dependencies, in a venv of its own) finds the library consistent with: no library outside
# the system's, no glibc symbol newer than the tag says.
python3 -m venv "$work/audit"
"$work/audit/bin/python" -m pip install --quiet --disable-pip-version-check \
    auditwheel==6.8.2 packaging==26.4 pyelftools==0.33
"$work/audit/bin/auditwheel" show "$wheel" > "$work/audit.txt" 2>&1 || {
    cat "$work/audit.txt" >&2
    exit 1
}
"$py" - "$wheel" "$work/audit.txt" <<'EOF'
import os, re, sys
wheel, report = sys.argv[1], open(sys.argv[2]).read()
found = re.search(r'consistent with the\s+following platform tag:\s+"([^"]+)"', report)
if not found:
    sys.exit(f"auditwheel gave no platform tag:\n{report}")
tag = os.path.basename(wheel)[:-len(".whl")].rsplit("-", 1)[1]
if tag != found.group(1):
    sys.exit(f"the wheel is tagged {tag} but auditwheel finds it consistent with {found.group(1)}")
print(f"wheel tag {tag}: auditwheel agrees")
EOF

# Contents: the package's modules (python/kvpool/*.py), its type stub and py.typed marker,
# the library, and the wheel's own metadata; nothing else of the tree (no tests, no CMake
# build output).
"$py" - "$wheel" "$version" python/kvpool/*.py python/kvpool/*.pyi python/kvpool/py.typed <<'EOF'
import os, sys, zipfile
wheel, version, modules = sys.argv[1], sys.argv[2], sys.argv[3:]
names = set(zipfile.ZipFile(wheel).namelist())
package = {f"kvpool/{os.path.basename(m)}" for m in modules} | {"kvpool/libkvpool.so"}
info = f"kvpool-{version}.dist-info/"
metadata = {info + name for name in ("METADATA", "WHEEL", "RECORD", "top_level.txt")}
missing, extra = (package | metadata) - names, names - package - metadata
if missing or extra:
    sys.exit(f"wheel contents: missing {sorted(missing)}, unexpected {sorted(extra)}")
print(f"wheel: {len(names)} files, the package (typed) and libkvpool.so")
EOF

"$py" -m pip install --quiet --disable-pip-version-check --no-deps "$wheel"
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if readelf -S "$site/kvpool/libkvpool.so" | grep -q '\.debug_info'; then
    echo "the wheel's libkvpool.so still has debug info" >&2
    exit 1
fi

# An installed package that carries its library (`$1`: the environment's python, `$2`: how it
# was installed), run from a folder outside the checkout: it must find the library beside
# itself, of its own version, and call it.
check_bundled() {
    (cd "$work" && env -u KVPOOL_LIB -u PYTHONPATH "$1" - "$2" <<'EOF'
import os, sys, sysconfig
import kvpool
installed = os.path.join(sysconfig.get_paths()["purelib"], "kvpool")
path = kvpool.find_library()
assert path == os.path.join(installed, "libkvpool.so"), path
lib = kvpool.load()
assert lib.version() == kvpool.__version__, (lib.version(), kvpool.__version__)
with kvpool.Pool(1024, page_size=16) as pool:
    slots = pool.alloc_extend([0, 0], [20, 3], [-1, -1])
    assert list(slots) == list(range(16, 36)) + [48, 49, 50], list(slots)
    pool.free_indices(slots)
    assert pool.available_size() == 1024, pool.available_size()
print(f"{sys.argv[1]}: kvpool {kvpool.__version__} from {path}, calls OK")
EOF
    )
}
check_bundled "$py" "installed wheel"

# An editable install (`pip install -e .`): the checkout's package on the path, loading the
# library of the tree's cargo build (find_library's last resort), as PYTHONPATH=python does.
python3 -m venv "$work/editable"
"$work/editable/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
(cd "$work" && env -u KVPOOL_LIB -u PYTHONPATH "$work/editable/bin/python" - "$root" <<'EOF'
import os, sys
import kvpool
root = sys.argv[1]
assert kvpool.__file__ == os.path.join(root, "python", "kvpool", "__init__.py"), kvpool.__file__
path = kvpool.find_library()
assert path.startswith(os.path.join(root, "target", "release")), path
with kvpool.Pool(64, page_size=16) as pool:
    assert list(pool.alloc(16)) == list(range(16, 32))
print(f"editable install: kvpool from {os.path.dirname(kvpool.__file__)}, library {path}")
EOF
)

# From the repository's URL (`pip install git+URL`, here the checkout's own commit): pip
# clones it and builds the wheel in the clone, a clean cargo build (about a minute on two
# cores). Checks the committed tree, not uncommitted changes.
python3 -m venv "$work/git"
"$work/git/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "git+file://$root@$(git rev-parse HEAD)"
check_bundled "$work/git/bin/python" "pip install git+file://..."

after=$(git status --porcelain)
if [[ "$before" != "$after" ]]; then
    echo "building the wheel changed the checkout:" >&2
    diff <(echo "$before") <(echo "$after") >&2 || true
    exit 1
fi
echo "wheel check passed: $(basename "$wheel")"
