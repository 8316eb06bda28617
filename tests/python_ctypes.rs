//! Runs the Python tests (`tests/python/test_kvpool.py`, standard library only; its PyTorch
//! tests run only where torch is installed) of the ctypes package `python/kvpool` against
//! the library built with `--features testing`. Without `python3` this test fails: the
//! Python binding is a supported way to use kvpool.

mod support;

use std::process::Command;

#[test]
fn python_ctypes_tests() {
    let lib = support::testing_cdylib();
    let mut cmd = Command::new("python3");
    cmd.arg("tests/python/test_kvpool.py")
        .arg("-v")
        .current_dir(support::manifest_dir())
        .env("KVPOOL_LIB", &lib)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) => panic!(
            "cannot run python3 ({e}); the Python ctypes tests need python3 on PATH \
             (standard library only)"
        ),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    // unittest prints "Ran N tests" and a final "OK" (possibly "OK (skipped=...)"); older
    // Pythons exit 0 even when no test ran, so look for both.
    let ran = stderr
        .lines()
        .find_map(|line| line.strip_prefix("Ran "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    let ok = stderr.lines().any(|line| {
        let line = line.trim_end();
        line == "OK" || line.starts_with("OK (")
    });
    assert!(
        output.status.success() && ok && ran >= 30,
        "python3 tests/python/test_kvpool.py failed (ran {ran} tests)\n{}",
        support::describe_output(&output)
    );
    println!("{stderr}");
}

/// `tests/python/test_cuda.py` (PyTorch + a CUDA device): on a machine without them every
/// test must report itself skipped, with the reason, rather than pass. On a GPU machine
/// `scripts/gpu/run.sh python` runs it for real.
#[test]
fn python_cuda_tests_run_or_report_skipped() {
    let lib = support::testing_cdylib();
    let output = Command::new("python3")
        .arg("tests/python/test_cuda.py")
        .arg("-v")
        .current_dir(support::manifest_dir())
        .env("KVPOOL_LIB", &lib)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python3 tests/python/test_cuda.py failed\n{}",
        support::describe_output(&output)
    );
    let skipped = stderr.lines().filter(|l| l.contains("skipped")).count();
    let ran_ok = stderr.lines().any(|l| l.trim_end() == "OK");
    assert!(skipped > 0 || ran_ok, "neither skipped nor run:\n{stderr}");
    println!("{stderr}");
}
