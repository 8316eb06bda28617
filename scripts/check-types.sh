#!/usr/bin/env bash
# Static types of the Python package. Its runtime code (python/kvpool/*.py) has no
# annotations; python/kvpool/__init__.pyi (with py.typed) types its public API. Checks:
#   1. mypy's stubtest: the stub against the runtime module — every name of kvpool.__all__
#      is in the stub, and every class, function, method and property of the stub exists at
#      run time with the same parameters (names, positional / keyword-only, which have
#      defaults), constants with the same values;
#   2. `mypy --strict` on tests/python/typed_usage.py, an engine's use of the API whose
#      assert_type calls pin the stub's result types (mypy checks the stub with it);
#   3. what stubtest cannot see: the stub's Library has every function of
#      kvpool.SIGNATURES (attributes set at run time), and each struct's fields, their types
#      and its __init__ follow its ctypes _fields_ (as do the config keyword arguments of
#      Scheduler, Adder and Delayer).
# mypy and its dependencies are pinned, installed into a temporary virtual environment (pip
# needs PyPI or a configured mirror). Nothing is built: importing kvpool loads no library.
# tests/python/typed_usage.py is a program too: KVPOOL_LIB=... python3 tests/python/typed_usage.py
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-types.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "check-types: FAILED: $*" >&2; exit 1; }
step() { printf '\n--- check-types: %s\n' "$*"; }

# mypy and everything it installs, exactly (pip check and the freeze below hold us to it).
pins=(mypy==2.4.1 librt==0.17.0 mypy_extensions==1.2.0 pathspec==1.1.1
      typing_extensions==4.16.0 ast_serialize==0.13.1)

step "mypy ${pins[0]#mypy==} in a virtual environment"
"$py" -m venv "$work/venv"
venv_py=$work/venv/bin/python
pip=("$venv_py" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --no-deps "${pins[@]}"
"${pip[@]}" check
# pip freeze lists a name as its metadata spells it: compare normalized names (PEP 503).
normalize() { awk -F'==' '{ n = tolower($1); gsub(/[-_.]+/, "-", n); print n "==" $2 }' | sort; }
installed=$("${pip[@]}" freeze | normalize)
expected=$(printf '%s\n' "${pins[@]}" | normalize)
[ "$installed" = "$expected" ] || fail "the environment holds"$'\n'"$installed"$'\n'"not"$'\n'"$expected"
# mypy's cache in the scratch folder, and no configuration from anywhere else.
printf '[mypy]\ncache_dir = %s\n' "$work/cache" >"$work/mypy.ini"

step "stubtest: python/kvpool/__init__.pyi against the module"
# The stub alone on mypy's path: stubtest then skips the private modules (_buffers,
# _native, _prepared), which have no stubs, instead of reading their .py files as stubs.
mkdir -p "$work/stubs/kvpool"
cp python/kvpool/__init__.pyi python/kvpool/py.typed "$work/stubs/kvpool/"
PYTHONPATH="$root/python" MYPYPATH="$work/stubs" \
    "$venv_py" -m mypy.stubtest --mypy-config-file "$work/mypy.ini" kvpool

step "mypy --strict: tests/python/typed_usage.py"
MYPYPATH="$root/python" \
    "$venv_py" -m mypy --config-file "$work/mypy.ini" --strict tests/python/typed_usage.py

step "what stubtest cannot see: Library's functions, the structs' fields"
PYTHONPATH="$root/python" "$py" - python/kvpool/__init__.pyi <<'PY'
import ast, ctypes, sys
import kvpool

classes = {node.name: node for node in ast.parse(open(sys.argv[1]).read()).body
           if isinstance(node, ast.ClassDef)}
errors = []


def annotated(name):
    """{attribute: annotation} of a class of the stub, in order."""
    return {node.target.id: ast.unparse(node.annotation) for node in classes[name].body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


functions = {name for name in annotated("Library") if name.startswith("kvp_")}
if functions != set(kvpool.SIGNATURES):
    errors.append(f"Library: missing {sorted(set(kvpool.SIGNATURES) - functions)}, "
                  f"not in SIGNATURES {sorted(functions - set(kvpool.SIGNATURES))}")


def annotation(ctype, parameter):
    """What the stub says of a field of this ctypes type (as a parameter: what it takes)."""
    if ctype is ctypes.c_bool:
        return "bool"
    if ctype is ctypes.c_double:
        return "float"
    if ctype is ctypes.c_void_p:
        return "int | None"
    if issubclass(ctype, ctypes._Pointer):
        pointee = ctype._type_
        name = pointee.__name__ if hasattr(kvpool, pointee.__name__) else next(
            f"ctypes.{name}" for name in ("c_uint64", "c_int64", "c_uint32", "c_int32")
            if getattr(ctypes, name) is pointee)  # (c_uint64 is c_ulong here)
        return f"ctypes._Pointer[{name}]" + (" | None" if parameter else "")
    return "int"


for struct in kvpool.STRUCTS.values():
    name = struct.__name__
    fields = {field: annotation(ctype, False) for field, ctype in struct._fields_}
    if annotated(name) != fields:
        errors.append(f"{name}: the stub has {annotated(name)}, the runtime {fields}")
    init = next(node for node in classes[name].body
                if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    params = {arg.arg: ast.unparse(arg.annotation) for arg in init.args.args[1:]}
    fields = {field: annotation(ctype, True) for field, ctype in struct._fields_}
    if params != fields or len(init.args.defaults) != len(fields) or init.args.kwonlyargs:
        errors.append(f"{name}.__init__: the stub has {params}, the runtime {fields} "
                      "(all optional)")

for config in (kvpool.SchedulerConfig, kvpool.AdderConfig, kvpool.DelayerConfig):
    keywords = list(annotated(f"_{config.__name__}Fields"))
    if keywords != [field for field, _ in config._fields_]:
        errors.append(f"_{config.__name__}Fields: {keywords}")

if errors:
    sys.exit("\n".join(errors))
print(f"Library's {len(functions)} functions and {len(kvpool.STRUCTS)} structs as at run time")
PY

printf '\ncheck-types: OK\n'
