"""Builds the Python package's wheel with the library inside it: `pip install .` (from a
checkout of this repository) runs `cargo build --release --lib --locked`, strips the
library's debug info, and installs `libkvpool.so` next to `python/kvpool`, where
`kvpool.find_library()` looks after `$KVPOOL_LIB`. The metadata is in pyproject.toml.

The package itself is pure Python (ctypes) and works without this: PYTHONPATH=python finds
the library of a cargo build of the same tree. The wheel only bundles one.

Environment: CARGO (the cargo to run; else `cargo` on PATH or in ~/.cargo/bin),
CARGO_TARGET_DIR (as cargo reads it), KVPOOL_WHEEL_STRIP=0 (keep the debug info: a library of
about 30 MB instead of 16, 15 of them the embedded kernels)."""

import os
import re
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
# setuptools' scratch folders, inside cargo's ignored target/: its default `build/` is where
# the README's CMake build goes, whose lib/ the wheel would otherwise pick up. Relative to
# this folder, where setuptools runs: it refuses absolute paths in its file lists.
SCRATCH = os.path.join("target", "python-build")


def cargo():
    """The cargo to run: $CARGO, else the one on PATH, else rustup's default place."""
    found = os.environ.get("CARGO") or shutil.which("cargo")
    if not found:
        candidate = os.path.join(os.path.expanduser("~"), ".cargo", "bin", "cargo")
        found = candidate if os.path.isfile(candidate) else None
    if not found:
        raise RuntimeError("building kvpool's wheel needs cargo (a Rust toolchain, "
                           "https://rustup.rs), which was not found; or set CARGO")
    return found


def build_library():
    """Runs the release build of the library and returns the path cargo wrote it to."""
    if not os.path.isfile(os.path.join(ROOT, "Cargo.toml")):
        raise RuntimeError("kvpool's wheel is built from a checkout of its repository "
                           f"(no Cargo.toml in {ROOT}); source distributions are not supported")
    subprocess.run([cargo(), "build", "--release", "--lib", "--locked"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    library = os.path.join(ROOT, target, "release", "libkvpool.so")
    if not os.path.isfile(library):
        raise RuntimeError(f"cargo reported success but {library} does not exist")
    return library


class BuildPyWithLibrary(build_py):
    """The package's modules, then the library beside them (stripped unless asked not to)."""

    def run(self):
        super().run()
        library = build_library()
        destination = os.path.join(self.build_lib, "kvpool", "libkvpool.so")
        self.mkpath(os.path.dirname(destination))
        self.copy_file(library, destination)
        if os.environ.get("KVPOOL_WHEEL_STRIP", "1") != "0":
            strip = shutil.which("strip")
            if strip is None:
                raise RuntimeError("strip (binutils) not found: install it, or set "
                                   "KVPOOL_WHEEL_STRIP=0 to keep the debug info")
            subprocess.run([strip, "--strip-debug", destination], check=True)


class BinaryDistribution(Distribution):
    """A distribution with a native part (the library): built into the platform's build
    folder and installed into platlib, not as pure Python."""

    def has_ext_modules(self):
        return True


# The libraries a manylinux wheel may link without carrying them (PEP 600: what every
# glibc distribution has); libkvpool links libc and libgcc_s only.
MANYLINUX_SYSTEM_LIBRARIES = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
    "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}


def manylinux_platform(library, machine):
    """`manylinux_2_N_<machine>` (PEP 600) for a library that links only system libraries,
    N the newest glibc symbol version it needs (what the build machine's glibc gave it: 2.34
    on Debian 12), so pip installs the wheel on any distribution with that glibc or newer.
    None where that cannot be read (no readelf) or does not hold: the wheel then keeps the
    build machine's plain `linux_<machine>` tag. scripts/check-wheel.sh compares the tag
    with auditwheel's verdict."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    english = {**os.environ, "LC_ALL": "C"}  # binutils translates the labels read below
    dynamic = subprocess.run([readelf, "--dynamic", "--wide", library], check=True,
                             capture_output=True, text=True, env=english).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
    if not needed <= MANYLINUX_SYSTEM_LIBRARIES:
        return None
    versions = subprocess.run([readelf, "--version-info", "--wide", library], check=True,
                              capture_output=True, text=True, env=english).stdout
    glibc = [(int(major), int(minor))
             for major, minor in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", versions)]
    if not glibc:
        return None
    major, minor = max(glibc)
    return f"manylinux_{major}_{minor}_{machine}"


class PlatformWheel(bdist_wheel):
    """Tagged for the platform (the wheel holds a native library), manylinux where the
    library allows it, and for any Python 3: the library is loaded through ctypes and uses
    no Python ABI."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        library = os.path.join(self.bdist_dir or "", "kvpool", "libkvpool.so")
        machine = platform.split("_", 1)[1] if platform.startswith("linux_") else None
        if machine and os.path.isfile(library):
            platform = manylinux_platform(library, machine) or platform
        return "py3", "none", platform


# A fresh scratch folder each time: egg_info reads the file list an earlier build left there
# (which may name another checkout's files), and build_py leaves the modules of an earlier
# build in place (a module since removed would still be packed). egg_info wants its base to
# exist.
shutil.rmtree(os.path.join(ROOT, SCRATCH), ignore_errors=True)
os.makedirs(os.path.join(ROOT, SCRATCH))
setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
    options={
        "build": {"build_base": os.path.join(SCRATCH, "build")},
        "egg_info": {"egg_base": SCRATCH},
    },
)
