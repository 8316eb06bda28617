//! Gives the shared library a SONAME carrying the ABI version (`libkvpool.so.0.<minor>`
//! while kvpool is 0.x), and tells the tests which target the C compiler must build for.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libkvpool.so.{abi}");
    }
    // The C/C++ tests compile with the `cc` crate, which needs the target triple.
    println!(
        "cargo:rustc-env=KVP_BUILD_TARGET={}",
        std::env::var("TARGET").unwrap()
    );
    println!(
        "cargo:rustc-env=KVP_BUILD_HOST={}",
        std::env::var("HOST").unwrap()
    );
    println!("cargo:rerun-if-changed=build.rs");
}
