//! Runs the Python tests (`tests/python/test_kvpool.py`, standard library only; its PyTorch
//! tests run only where torch is installed) of the ctypes package `python/kvpool` against
//! the library built with `--features testing`. Without `python3` this test fails: the
//! Python binding is a supported way to use kvpool.
//!
//! A Python test that was skipped (no torch, no GPU) must not pass for one that ran: each
//! Rust test writes the skipped ones, with unittest's reason, and their count straight to
//! stderr, which `cargo test` shows even for a passing test (it captures only `print!`).

mod support;

use std::io::Write;
use std::process::Command;

/// The `... skipped 'reason'` lines of unittest's verbose output, each with the test's name
/// (for a test with a docstring unittest puts the name on the line before, the docstring's
/// first line on the `... skipped` line).
fn skipped_lines(stderr: &str) -> Vec<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let mut skipped = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.contains(" ... skipped") {
            continue;
        }
        match i.checked_sub(1).map(|j| lines[j]) {
            Some(name) if !line.starts_with("test") && name.starts_with("test") => {
                skipped.push(format!("{} -- {}", name.trim(), line.trim()));
            }
            _ => skipped.push(line.trim().to_string()),
        }
    }
    skipped
}

/// Writes `script`'s skipped tests to stderr, uncaptured, so `cargo test` shows them.
fn report_skipped(script: &str, ran: u32, skipped: &[String]) {
    if skipped.is_empty() {
        return;
    }
    let mut text = format!(
        "\n{script}: {} of {ran} Python tests SKIPPED (not run, not passed):\n",
        skipped.len()
    );
    for line in skipped {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    // Straight to the file descriptor: the test harness captures only print!/eprint!.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// The N of unittest's "Ran N tests" line (0 if absent).
fn ran_count(stderr: &str) -> u32 {
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("Ran "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0)
}

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
    let ran = ran_count(&stderr);
    let ok = stderr.lines().any(|line| {
        let line = line.trim_end();
        line == "OK" || line.starts_with("OK (")
    });
    assert!(
        output.status.success() && ok && ran >= 30,
        "python3 tests/python/test_kvpool.py failed (ran {ran} tests)\n{}",
        support::describe_output(&output)
    );
    let skipped = skipped_lines(&stderr);
    // Skips are counted in unittest's final line too; the two must agree.
    let summary = format!("OK (skipped={})", skipped.len());
    assert!(
        skipped.is_empty() || stderr.lines().any(|l| l.trim_end() == summary),
        "skipped tests miscounted (want {summary:?}):\n{stderr}"
    );
    report_skipped("tests/python/test_kvpool.py", ran, &skipped);
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
    let skipped = skipped_lines(&stderr);
    let ran_ok = stderr.lines().any(|l| l.trim_end() == "OK");
    assert!(
        !skipped.is_empty() || ran_ok,
        "neither skipped nor run:\n{stderr}"
    );
    report_skipped("tests/python/test_cuda.py", ran_count(&stderr), &skipped);
    println!("{stderr}");
}
