//! The per-thread message describing the last failed call.

use std::cell::RefCell;
use std::ffi::c_char;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `message` as this thread's last error. During the thread's exit, once its
/// thread-locals are gone (a failing call from a pthread key destructor or a C++
/// `thread_local`'s), the message is dropped: `with` would panic, and a second panic on the
/// way out of the boundary would abort the process.
pub(crate) fn set(message: impl Into<String>) {
    let message = message.into();
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut text) = slot.try_borrow_mut() {
            *text = message;
        }
    });
}

/// Copies this thread's last error message into `buf` (at most `buf_len - 1` bytes plus a
/// NUL) and returns the message's full length in bytes, without the NUL. Call it with
/// `buf = NULL, buf_len = 0` to learn the size.
///
/// The message describes the most recent failing kvpool call *on this thread*; it is
/// meaningful only right after a call returned a status other than `KVP_STATUS_OK` (decide
/// success from the status, never from the message).
///
/// # Safety
/// `buf` must be NULL or point to `buf_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn kvp_last_error_message(buf: *mut c_char, buf_len: usize) -> usize {
    let copy = || {
        // (No message once the thread's locals are gone: 0, as for none.)
        LAST_ERROR
            .try_with(|slot| {
                let Ok(message) = slot.try_borrow() else {
                    return 0;
                };
                let bytes = message.as_bytes();
                if !buf.is_null() && buf_len > 0 {
                    let n = bytes.len().min(buf_len - 1);
                    // SAFETY: the caller guarantees `buf` has `buf_len` writable bytes; we write
                    // `n + 1 <= buf_len` of them, from a distinct allocation.
                    unsafe {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
                        *buf.add(n) = 0;
                    }
                }
                bytes.len()
            })
            .unwrap_or(0)
    };
    std::panic::catch_unwind(copy).unwrap_or(0)
}
