//! Shared by the integration tests that exercise the C ABI from C, C++ and Python: builds
//! the shared library with the test-only `testing` feature (which adds `kvp_testing_panic`
//! and `kvp_testing_poison_pool`) into its own target directory, once per test process.
#![allow(dead_code)] // each test crate uses a different subset of these helpers

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The crate root.
pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/ffi-tests`: the target directory of the testing build and of the programs the
/// tests compile, kept apart from `target/release` so the `testing` feature never leaks
/// into a normal build.
pub fn ffi_target_dir() -> PathBuf {
    manifest_dir().join("target").join("ffi-tests")
}

/// The SONAME `build.rs` gives the library (`libkvpool.so.0.<minor>` while kvpool is 0.x);
/// programs linked with `-lkvpool` ask the dynamic loader for this name.
pub fn soname() -> String {
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let minor = env!("CARGO_PKG_VERSION_MINOR");
    if major == "0" {
        format!("libkvpool.so.0.{minor}")
    } else {
        format!("libkvpool.so.{major}")
    }
}

/// Builds `libkvpool.so` with `--features testing` (once per process) and returns its path,
/// `target/ffi-tests/release/libkvpool.so`. Panics, showing cargo's output, if the build
/// fails.
pub fn testing_cdylib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(build_testing_cdylib).clone()
}

fn build_testing_cdylib() -> PathBuf {
    let target_dir = ffi_target_dir();
    let output = Command::new(env!("CARGO"))
        .args(["build", "--release", "--features", "testing", "--lib"])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(manifest_dir())
        // A cross-compiling outer build must not redirect the artifact elsewhere.
        .env_remove("CARGO_BUILD_TARGET")
        .output()
        .expect("failed to run cargo to build the testing cdylib");
    assert!(
        output.status.success(),
        "`cargo build --release --features testing --lib` failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = target_dir.join("release");
    let lib = dir.join("libkvpool.so");
    assert!(lib.is_file(), "{} was not produced", lib.display());
    link_soname(&dir);
    lib
}

/// Programs linked against the library look for its SONAME at run time; cargo only writes
/// `libkvpool.so`, so put a `libkvpool.so.0.<minor>` link next to it (atomically replaced,
/// in case another test process does the same).
fn link_soname(dir: &Path) {
    let link = dir.join(soname());
    let tmp = dir.join(format!("{}.tmp{}", soname(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink("libkvpool.so", &tmp)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", tmp.display()));
    std::fs::rename(&tmp, &link)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", link.display()));
}

/// A fresh, empty scratch directory `target/ffi-tests/tmp/<name>-<pid>`.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = ffi_target_dir()
        .join("tmp")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// stdout and stderr of a finished process, for failure messages.
pub fn describe_output(output: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
