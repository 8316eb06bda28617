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
