//! Version numbers: compile-time macros (emitted into the header) and run-time functions.

use std::ffi::c_char;

/// Major version of the kvpool this header belongs to.
pub const KVP_VERSION_MAJOR: u32 = 0;
/// Minor version of the kvpool this header belongs to.
pub const KVP_VERSION_MINOR: u32 = 1;
/// Patch version of the kvpool this header belongs to.
pub const KVP_VERSION_PATCH: u32 = 0;
/// ABI version of this header. It changes whenever a signature, a struct layout, a status
/// number or a documented ownership rule changes; while kvpool is 0.x it equals the minor
/// version, and the shared library's SONAME is `libkvpool.so.0.<minor>`. Compare it with
/// `kvp_abi_version()` at start-up to catch a header/library mismatch.
pub const KVP_ABI_VERSION: u32 = 1;

static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// Returns the library's version as a static NUL-terminated string, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn kvp_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// Returns the library's ABI version; equal to `KVP_ABI_VERSION` when the header and the
/// loaded library match.
#[no_mangle]
pub extern "C" fn kvp_abi_version() -> u32 {
    KVP_ABI_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_constants_match_cargo_toml() {
        assert_eq!(
            KVP_VERSION_MAJOR.to_string(),
            env!("CARGO_PKG_VERSION_MAJOR")
        );
        assert_eq!(
            KVP_VERSION_MINOR.to_string(),
            env!("CARGO_PKG_VERSION_MINOR")
        );
        assert_eq!(
            KVP_VERSION_PATCH.to_string(),
            env!("CARGO_PKG_VERSION_PATCH")
        );
        if KVP_VERSION_MAJOR == 0 {
            assert_eq!(KVP_ABI_VERSION, KVP_VERSION_MINOR);
        }
        assert_eq!(&VERSION[..VERSION.len() - 1], crate::VERSION);
    }
}
