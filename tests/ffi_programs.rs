//! Builds and runs the C99 and C++17 tests of the C ABI (`tests/c/abi_test.c`,
//! `tests/c/scheduler_test.c`, `tests/c/pool_guard_test.c`, `tests/cpp/abi_test.cpp`), the C++17 tests of the RAII
//! wrappers (`tests/cpp/kvpool_hpp_test.cpp`, `tests/cpp/kvpool_hpp_device_args_test.cpp`,
//! `include/kvpool.hpp`) and the consumer
//! programs of `cpp-examples/` against the library built with `--features testing`; checks
//! that `include/kvpool.h` compiles cleanly (twice included, strict warnings) as C and C++,
//! and that the library exports exactly the header's functions and `abi/kvpool.symbols`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lang {
    C,
    Cpp,
}

/// The C or C++ compiler for the target this crate is built for, found by the `cc` crate,
/// with the strict warning set every test program is held to.
fn compiler(lang: Lang, std: &str) -> Command {
    let mut cmd = cc::Build::new()
        .cargo_metadata(false)
        .target(env!("KVP_BUILD_TARGET"))
        .host(env!("KVP_BUILD_HOST"))
        .opt_level(0)
        .debug(true)
        .cpp(lang == Lang::Cpp)
        .get_compiler()
        .to_command();
    cmd.arg(format!("-std={std}"))
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg("-I")
        .arg(support::manifest_dir().join("include"));
    cmd
}

fn run_to_completion(cmd: &mut Command, what: &str) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {what} ({cmd:?}): {e}"))
}

/// Compiles `source` into an executable linked against the testing cdylib; with `testing`,
/// `-DKVP_TESTING` makes the test-only declarations visible.
fn build_program(lang: Lang, source: &str, name: &str, testing: bool) -> PathBuf {
    let defines = if testing {
        vec!["-DKVP_TESTING".to_string()]
    } else {
        vec![]
    };
    build_program_with(lang, source, name, &defines)
}

/// `build_program` with extra compiler arguments (`-D...`).
fn build_program_with(lang: Lang, source: &str, name: &str, extra: &[String]) -> PathBuf {
    let lib = support::testing_cdylib();
    let lib_dir = lib.parent().unwrap();
    let exe = support::scratch_dir(name).join(name);
    let std = match lang {
        Lang::C => "c99",
        Lang::Cpp => "c++17",
    };
    let mut cmd = compiler(lang, std);
    cmd.args(extra)
        .arg(support::manifest_dir().join(source))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib_dir)
        .arg("-lkvpool")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()));
    if lang == Lang::Cpp {
        cmd.arg("-pthread");
    }
    let output = run_to_completion(&mut cmd, "the compiler");
    assert!(
        output.status.success(),
        "compiling {source} failed\ncommand: {cmd:?}\n{}",
        support::describe_output(&output)
    );
    exe
}

/// Runs a test program; it must exit 0 and end with its "all N checks passed" line (N > 100).
fn run_program(exe: &Path, marker: &str) {
    run_program_checks(exe, marker, 101);
}

/// `run_program` for a program of at least `min_checks` checks.
fn run_program_checks(exe: &Path, marker: &str, min_checks: u32) {
    let output = run_to_completion(&mut Command::new(exe), "the test program");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let passed = stdout
        .lines()
        .last()
        .and_then(|line| line.strip_prefix(marker))
        .and_then(|rest| rest.strip_suffix(" checks passed"))
        .and_then(|n| n.parse::<u32>().ok());
    assert!(
        output.status.success() && passed.is_some_and(|n| n >= min_checks),
        "{} failed\n{}",
        exe.display(),
        support::describe_output(&output)
    );
    println!("{}", stdout.trim_end());
    // Passed: the scratch directory is no longer needed (kept on failure, for debugging).
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

#[test]
fn c99_abi_test() {
    let exe = build_program(Lang::C, "tests/c/abi_test.c", "abi_test_c", true);
    run_program(&exe, "abi_test (C): all ");
}

#[test]
fn cpp17_abi_test() {
    let exe = build_program(Lang::Cpp, "tests/cpp/abi_test.cpp", "abi_test_cpp", true);
    run_program(&exe, "abi_test (C++): all ");
}

/// The header-only RAII wrappers (`include/kvpool.hpp`), test-only parts included. The same
/// program runs under ctest in the consumer project (scripts/check-install.sh).
#[test]
fn cpp17_kvpool_hpp_test() {
    let exe = build_program(
        Lang::Cpp,
        "tests/cpp/kvpool_hpp_test.cpp",
        "kvpool_hpp_test",
        true,
    );
    run_program(&exe, "kvpool_hpp_test (C++): all ");
}

/// What kvpool.hpp's device-pool methods pass to the C ABI, without a GPU
/// (`tests/cpp/kvpool_hpp_device_args_test.cpp` defines recording stand-ins for the C
/// functions it checks; the rest is the real library).
#[test]
fn cpp17_kvpool_hpp_device_args_test() {
    let exe = build_program(
        Lang::Cpp,
        "tests/cpp/kvpool_hpp_device_args_test.cpp",
        "kvpool_hpp_device_args_test",
        false,
    );
    run_program_checks(&exe, "kvpool_hpp_device_args_test (C++): all ", 13);
}

/// Stream-ordered release through kvpool.hpp (`tests/cpp/cuda_release_test.cpp`): a
/// `kvpool::pool` destroyed during exception unwinding while its calls are queued behind a
/// long kernel. It opens the driver itself with dlopen, so it builds everywhere; without a
/// driver it reports itself skipped (printed here), on a GPU it must pass
/// (`scripts/gpu/run.sh tests` runs it with `--require-gpu`).
#[test]
fn cpp17_cuda_release_test() {
    let exe = build_program_with(
        Lang::Cpp,
        "tests/cpp/cuda_release_test.cpp",
        "cuda_release_test",
        &["-ldl".to_string()],
    );
    let output = run_to_completion(&mut Command::new(&exe), "cuda_release_test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let skipped = last.starts_with("cuda_release_test (C++): SKIPPED: ");
    let passed = last
        .strip_prefix("cuda_release_test (C++): all ")
        .and_then(|rest| rest.strip_suffix(" checks passed"))
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n >= 10);
    assert!(
        output.status.success() && (skipped || passed),
        "{} failed\n{}",
        exe.display(),
        support::describe_output(&output)
    );
    if skipped {
        assert!(
            !kvpool::cuda::driver_available(),
            "the C++ test skipped although this process can load the driver:\n{stdout}"
        );
    }
    println!("{}", stdout.trim_end());
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

/// The consumer project's C check: the header's version macros, the loaded library's
/// `kvp_version()` / `kvp_abi_version()` and Cargo.toml's version (standing in for the CMake
/// package's, which comes from Cargo.toml) agree.
#[test]
fn c99_version_check() {
    let define = format!("-DKVPOOL_PACKAGE_VERSION=\"{}\"", env!("CARGO_PKG_VERSION"));
    let exe = build_program_with(
        Lang::C,
        "cpp-examples/version_check.c",
        "version_check",
        &[define],
    );
    let output = run_to_completion(&mut Command::new(&exe), "version_check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().last() == Some("version_check: OK"),
        "{}",
        support::describe_output(&output)
    );
    assert!(stdout.contains(&format!("package {}", env!("CARGO_PKG_VERSION"))));
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

/// An engine loop in C99 over an attached scheduler and a paged pool: every allocation
/// succeeds, every request's `kv_len` is its row, everything finishes, the pool refills.
/// Then values whose arithmetic would wrap, and configurations that never admit, are
/// refused with their status and message, changing nothing.
#[test]
fn c99_scheduler_engine_loop() {
    let exe = build_program(
        Lang::C,
        "tests/c/scheduler_test.c",
        "scheduler_test_c",
        false,
    );
    run_program(&exe, "scheduler_test (C): all ");
}

/// Out-of-memory at pool creation is a status (in a child under an address-space limit),
/// and stale continuations are refused by the pages' fill points; rewinds move them back.
#[test]
fn c99_pool_guards() {
    let exe = build_program(
        Lang::C,
        "tests/c/pool_guard_test.c",
        "pool_guard_test_c",
        false,
    );
    run_program(&exe, "pool_guard_test (C): all ");
}

/// The request-to-token table calls from C99: prefill, decode, chunked prefill, FlashInfer
/// page tables, bad rows refused with nothing written, frees by row.
#[test]
fn c99_rows() {
    let exe = build_program(Lang::C, "tests/c/rows_test.c", "rows_test_c", false);
    run_program(&exe, "rows_test (C): all ");
}

/// Multi-step decode reservations from C99 on a host pool: K reserved steps against K plain
/// decodes on a twin pool, a table written by a step, an early finish, the refusals.
#[test]
fn c99_reservation() {
    let exe = build_program(
        Lang::C,
        "tests/c/reservation_test.c",
        "reservation_test_c",
        false,
    );
    run_program(&exe, "reservation_test (C): all ");
}

/// The C++17 example an engine author copies from builds with the strict warning set
/// (without the test-only declarations), runs, and reports a drained workload.
#[test]
fn cpp17_serving_loop_example() {
    let exe = build_program(
        Lang::Cpp,
        "cpp-examples/serving_loop.cpp",
        "serving_loop",
        false,
    );
    let output = run_to_completion(&mut Command::new(&exe), "serving_loop");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().last() == Some("serving_loop: OK"),
        "{} failed\n{}",
        exe.display(),
        support::describe_output(&output)
    );
    // "serving_loop: 200 requests, 196 finished, 0 aborted, 4 rejected as unfittable"
    let counts: Vec<u64> = stdout
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("serving_loop: "))
        .map(|rest| {
            rest.split(", ")
                .filter_map(|part| part.split_whitespace().next()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        matches!(counts[..], [total, finished, 0, rejected]
            if total == 200 && finished + rejected == total && rejected > 0 && finished > 150),
        "unexpected summary {counts:?}\n{stdout}"
    );
    println!("{}", stdout.trim_end());
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

/// A translation unit that includes the header twice (the include guard must hold) and,
/// without `KVP_TESTING`, must not see the test-only declarations: it defines variables
/// with their names, which would clash with a function declaration.
const DOUBLE_INCLUDE_TU: &str = r#"#include "kvpool.h"
#include "kvpool.h"
#ifndef KVPOOL_H
#error "the include guard macro KVPOOL_H is not defined"
#endif
#if KVP_ABI_VERSION < 1
#error "KVP_ABI_VERSION is missing"
#endif

static int kvp_testing_panic = 1;
static int kvp_testing_poison_pool = 2;

int kvp_double_include_check(void);
int kvp_double_include_check(void) {
    struct kvp_pool_config config = kvp_pool_config_default();
    struct kvp_pool *pool = 0;
    enum kvp_status status = kvp_pool_new(&config, &pool);
    kvp_pool_free(pool);
    return (int)status + kvp_testing_panic + kvp_testing_poison_pool;
}
"#;

#[test]
fn header_compiles_twice_included_as_c_and_cpp() {
    let dir = support::scratch_dir("header");
    for (lang, std, file) in [
        (Lang::C, "c99", "double_include.c"),
        (Lang::C, "c11", "double_include_c11.c"),
        (Lang::C, "c17", "double_include_c17.c"),
        (Lang::Cpp, "c++11", "double_include_cpp11.cpp"),
        (Lang::Cpp, "c++14", "double_include_cpp14.cpp"),
        (Lang::Cpp, "c++17", "double_include.cpp"),
        (Lang::Cpp, "c++20", "double_include_cpp20.cpp"),
    ] {
        let source = dir.join(file);
        std::fs::write(&source, DOUBLE_INCLUDE_TU).unwrap();
        let object = dir.join(format!("{file}.o"));
        let mut cmd = compiler(lang, std);
        cmd.arg("-c").arg(&source).arg("-o").arg(&object);
        let output = run_to_completion(&mut cmd, "the compiler");
        assert!(
            output.status.success(),
            "{file} (-std={std}) does not compile cleanly\ncommand: {cmd:?}\n{}",
            support::describe_output(&output)
        );
        assert!(object.is_file());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `include/kvpool.hpp` compiles cleanly twice included as C++17 and C++20, and an older
/// standard gets only its `#error` naming C++17 from it, not a cascade of errors.
#[test]
fn cpp_wrapper_header_compiles_twice_included() {
    let dir = support::scratch_dir("hpp_header");
    let source = dir.join("double_include_hpp.cpp");
    std::fs::write(
        &source,
        "#include \"kvpool.hpp\"\n#include \"kvpool.hpp\"\n#ifndef KVPOOL_HPP\n#error guard\n#endif\n\
         int kvp_hpp_check();\nint kvp_hpp_check() {\n    \
         kvpool::pool pool = kvpool::pool::create<int32_t>(64, 4);\n    \
         return static_cast<int>(pool.alloc<int32_t>(4).size());\n}\n",
    )
    .unwrap();
    for (std, compiles) in [("c++14", false), ("c++17", true), ("c++20", true)] {
        let mut cmd = compiler(Lang::Cpp, std);
        cmd.arg("-c")
            .arg(&source)
            .arg("-o")
            .arg(dir.join(format!("hpp_{std}.o")));
        let output = run_to_completion(&mut cmd, "the compiler");
        assert_eq!(
            output.status.success(),
            compiles,
            "kvpool.hpp with -std={std}\n{}",
            support::describe_output(&output)
        );
        if !compiles {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains("kvpool.hpp needs C++17"), "{stderr}");
            let in_header = stderr
                .lines()
                .filter(|line| line.contains("kvpool.hpp:") && line.contains("error:"))
                .count();
            assert_eq!(in_header, 1, "{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// kvpool.hpp refuses, at compile time, a `kvpool::device_span` where a host buffer is taken
/// (a host pool's index buffer, a length array, the host copy of an `_async` method's
/// lengths): the library would read or write device memory on the host. The positive control
/// (host vectors there) compiles.
#[test]
fn device_span_is_not_a_host_buffer() {
    let dir = support::scratch_dir("device_span_host");
    let cases = [
        (
            "host",
            "pool.free_indices(host);\n    pool.alloc_decode_async(host, dev, dev, out, nullptr);",
        ),
        ("free_indices", "pool.free_indices(dev);"),
        (
            "lens_host",
            "pool.alloc_decode_async(dev, dev, dev, out, nullptr);",
        ),
        ("alloc_out", "pool.alloc(1, out);"),
    ];
    for (name, call) in cases {
        let source = dir.join(format!("{name}.cpp"));
        std::fs::write(
            &source,
            format!(
                "#include \"kvpool.hpp\"\nvoid f(kvpool::pool &pool, const std::vector<int64_t> &host,\n       \
                 kvpool::device_span<const int64_t> dev, kvpool::device_span<int64_t> out);\n\
                 void f(kvpool::pool &pool, const std::vector<int64_t> &host,\n       \
                 kvpool::device_span<const int64_t> dev, kvpool::device_span<int64_t> out) {{\n    \
                 (void)host;\n    (void)dev;\n    (void)out;\n    {call}\n}}\n"
            ),
        )
        .unwrap();
        let mut cmd = compiler(Lang::Cpp, "c++17");
        cmd.arg("-c")
            .arg(&source)
            .arg("-o")
            .arg(dir.join(format!("{name}.o")));
        let output = run_to_completion(&mut cmd, "the compiler");
        let stderr = String::from_utf8_lossy(&output.stderr);
        if name == "host" {
            assert!(
                output.status.success(),
                "{name}\n{}",
                support::describe_output(&output)
            );
        } else {
            assert!(
                !output.status.success() && stderr.contains("kvpool::device_span is device memory"),
                "{name}: compiled, or failed for another reason\n{}",
                support::describe_output(&output)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `KVP_NODISCARD` makes an ignored status a warning (an error under -Werror), in C through
/// the GNU attribute and in C++17 through `[[nodiscard]]`; the positive control (the same
/// call, its status used) compiles.
#[test]
fn ignored_status_is_diagnosed() {
    let dir = support::scratch_dir("nodiscard");
    let body = |use_it: bool| {
        format!(
            "#include \"kvpool.h\"\nint ignore_status(struct kvp_pool *pool);\n\
             int ignore_status(struct kvp_pool *pool) {{\n    {}kvp_pool_clear(pool);\n    \
             return 0;\n}}\n",
            if use_it { "return (int)" } else { "" }
        )
    };
    for (lang, std, ext) in [(Lang::C, "c99", "c"), (Lang::Cpp, "c++17", "cpp")] {
        for use_it in [true, false] {
            let source = dir.join(format!("status_used_{use_it}.{ext}"));
            std::fs::write(&source, body(use_it)).unwrap();
            let mut cmd = compiler(lang, std);
            cmd.arg("-c")
                .arg(&source)
                .arg("-o")
                .arg(dir.join(format!("status_used_{use_it}_{ext}.o")));
            let output = run_to_completion(&mut cmd, "the compiler");
            assert_eq!(
                output.status.success(),
                use_it,
                "-std={std}, status used: {use_it}\n{}",
                support::describe_output(&output)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every dynamic symbol `lib` defines (`nm -D --defined-only`), sorted.
fn exported_symbols(lib: &Path) -> Vec<String> {
    let output = run_to_completion(
        Command::new("nm").args(["-D", "--defined-only"]).arg(lib),
        "nm",
    );
    assert!(
        output.status.success(),
        "{}",
        support::describe_output(&output)
    );
    let mut exported: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .map(str::to_string)
        .collect();
    exported.sort();
    exported
}

/// Every `kvp_*` function the testing library exports is declared in the header, and every
/// function the header declares is exported.
#[test]
fn exported_symbols_match_header() {
    let lib = support::testing_cdylib();
    let mut exported = exported_symbols(&lib);
    exported.retain(|name| name.starts_with("kvp_"));

    let header = std::fs::read_to_string(support::manifest_dir().join("include/kvpool.h"))
        .expect("read include/kvpool.h");
    let mut declared = declared_functions(&header);
    declared.sort();
    declared.dedup();
    assert!(declared.len() >= 20, "parsed only {declared:?}");
    assert_eq!(exported, declared);
}

/// The library exports exactly the committed list `abi/kvpool.symbols` (plus, in this
/// testing build, the `kvp_testing_*` functions). CI also checks the release build with
/// `scripts/check-symbols.sh`.
#[test]
fn exported_symbols_match_abi_list() {
    let list = std::fs::read_to_string(support::manifest_dir().join("abi/kvpool.symbols"))
        .expect("read abi/kvpool.symbols");
    let listed: Vec<&str> = list
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(listed, sorted, "abi/kvpool.symbols is not sorted");
    let exported: Vec<String> = exported_symbols(&support::testing_cdylib())
        .into_iter()
        .filter(|name| !name.starts_with("kvp_testing_"))
        .collect();
    assert_eq!(
        exported, listed,
        "the exports differ from abi/kvpool.symbols; if the ABI change is intended, run \
         scripts/check-symbols.sh --update"
    );
}

/// Every macro `include/kvpool.h` defines carries the `KVP_` prefix, except its include
/// guard: C has one namespace, and an engine may well define `CLIP_MAX_NEW_TOKENS` itself.
#[test]
fn header_macros_are_prefixed() {
    let header = std::fs::read_to_string(support::manifest_dir().join("include/kvpool.h"))
        .expect("read include/kvpool.h");
    assert_eq!(
        defined_macros("#define CLIP 4096\n  #  define X(a) a\n#ifndef KVP_Y\n#defineZ\n"),
        ["CLIP", "X"]
    );
    let defined = defined_macros(&header);
    assert!(
        defined.iter().any(|m| m == "KVP_CLIP_MAX_NEW_TOKENS")
            && defined.iter().any(|m| m == "KVP_RETRACT_DECODE_STEPS")
            && defined.iter().any(|m| m == "KVPOOL_H"),
        "parsed {defined:?}"
    );
    let unprefixed: Vec<&String> = defined
        .iter()
        .filter(|m| !m.starts_with("KVP_") && m.as_str() != "KVPOOL_H")
        .collect();
    assert!(unprefixed.is_empty(), "unprefixed macros: {unprefixed:?}");
}

/// The names of the `#define`s of a header (`#` and `define` may be spaced).
fn defined_macros(header: &str) -> Vec<String> {
    header
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix('#'))
        .filter_map(|rest| rest.trim_start().strip_prefix("define"))
        .filter(|rest| rest.starts_with([' ', '\t']))
        .filter_map(|rest| {
            let name: String = rest
                .trim_start()
                .bytes()
                .take_while(|&b| is_ident(b))
                .map(char::from)
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Names `kvp_*` followed by `(` outside comments: the header's function declarations.
fn declared_functions(header: &str) -> Vec<String> {
    let mut code = String::new();
    let mut rest = header;
    while let Some(start) = rest.find("/*") {
        code.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("unterminated comment") + start + 2;
        rest = &rest[end..];
    }
    code.push_str(rest);
    let code: String = code
        .lines()
        .map(|line| line.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let mut names = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while let Some(pos) = code[i..].find("kvp_") {
        let start = i + pos;
        let ident_start = start == 0 || !is_ident(bytes[start - 1]);
        let mut end = start;
        while end < bytes.len() && is_ident(bytes[end]) {
            end += 1;
        }
        let after = code[end..].trim_start();
        if ident_start && after.starts_with('(') {
            names.push(code[start..end].to_string());
        }
        i = end.max(start + 1);
    }
    names
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Builds and runs the README's first ```` ```lang ```` block (a complete program, with
/// strict warnings); returns the README and the program's output.
fn run_readme_example(lang: Lang) -> (String, Output) {
    let (fence, ext) = match lang {
        Lang::C => ("```c\n", "c"),
        Lang::Cpp => ("```cpp\n", "cpp"),
    };
    let readme = std::fs::read_to_string(support::manifest_dir().join("README.md")).unwrap();
    let start = readme.find(fence).expect("README has the example") + fence.len();
    let code = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(
        code.contains("int main"),
        "the first {ext} block is the complete example"
    );
    let source =
        support::scratch_dir(&format!("readme_{ext}_source")).join(format!("readme_example.{ext}"));
    std::fs::write(&source, code).unwrap();
    let name = format!("readme_{ext}_example");
    let exe = build_program(lang, source.to_str().unwrap(), &name, false);
    let output = run_to_completion(&mut Command::new(&exe), "the README example");
    assert!(
        output.status.success(),
        "{}",
        support::describe_output(&output)
    );
    (readme, output)
}

/// The text the README quotes (between backquotes) that starts with `prefix`.
fn quoted<'a>(readme: &'a str, prefix: &str) -> &'a str {
    readme
        .split('`')
        .find(|s| s.starts_with(prefix))
        .unwrap_or_else(|| panic!("README quotes an output starting with {prefix:?}"))
}

/// The README's C example compiles as written, runs, and reports the error it promises.
#[test]
fn readme_c_example() {
    let (readme, output) = run_readme_example(Lang::C);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end(), quoted(&readme, "alloc_extend: "));
}

/// The README's C++ quickstart compiles as written (C++17, strict warnings), runs, and
/// prints what the README says it prints.
#[test]
fn readme_cpp_example() {
    let (readme, output) = run_readme_example(Lang::Cpp);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            quoted(&readme, "kvp_pool_free_indices: "),
            "1048576 slots free"
        ]
    );
    assert!(readme.contains("and `1048576 slots free`"));
}
