//! Fuzzes the C ABI of `kvp_adder` (one prefill pass's admission budget) with arbitrary
//! configurations and requests, extreme values included (0, `INT64_MAX`, `UINT64_MAX`,
//! non-finite ratios), checked against what `include/kvpool.h` promises:
//!
//! - `kvp_adder_new` fails exactly when its documented rules say (NULL arguments, then the
//!   listed invalid fields), with their status, and writes no adder when it fails;
//! - `kvp_adder_add_one_req` / `_add_chunked_req` fail exactly on their documented length
//!   rules (or NULL), and a failing call writes no admission and leaves the budget as it
//!   was, as does a refused (not admitted) request;
//! - an admitted request gets at most what it asked for; `chunked` says tokens remain;
//! - a handle of another kind is refused; no call ever panics (with cargo-fuzz's overflow
//!   checks on, an arithmetic overflow in the admission code is a panic too).
//!
//! There is no reference model of the admission arithmetic here (tests/scheduler_sim.rs
//! and the unit tests check the numbers); this target checks the boundary's contract.
#![no_main]

use std::ptr;

use kvpool::ffi::*;
use libfuzzer_sys::fuzz_target;

/// Reads the fuzzer's bytes; past the end it yields zeros, so every input decodes.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    /// A length-like value: mostly small, sometimes at the edges of the integer types.
    fn value(&mut self) -> u64 {
        let b = self.byte();
        match b % 16 {
            0 => 0,
            1 => u64::MAX,
            2 => i64::MAX as u64,
            3 => i64::MAX as u64 + 1,
            4 => i64::MAX as u64 - u64::from(self.byte()),
            5 => 1 << (self.byte() % 64),
            6..=9 => u64::from(self.byte()) * 16 + u64::from(self.byte() % 16),
            _ => u64::from(self.byte()),
        }
    }
    fn ratio(&mut self) -> f64 {
        match self.byte() % 10 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => 0.0,
            3 => -1.0,
            4 => f64::MIN_POSITIVE,
            5 => 1e300,
            _ => f64::from(self.byte()) / 64.0 + 0.01,
        }
    }
}

const I64_MAX: u64 = i64::MAX as u64;

/// `x` rounded up to a multiple of `page` exceeds `INT64_MAX` (the documented length rule).
fn rounded_too_long(x: u128, page: u64) -> bool {
    let page = u128::from(page.max(1));
    x.div_ceil(page) * page > u128::from(I64_MAX)
}

fn budget(adder: *const kvp_adder) -> [u64; 5] {
    let mut b = kvp_budget {
        rem_total_tokens: 0.0,
        cur_rem_tokens: 0,
        rem_input_tokens: 0,
        rem_chunk_tokens: 0,
        state: 0,
    };
    // SAFETY: live adder, writable out-parameter.
    let s = unsafe { kvp_adder_get_budget(adder, &mut b) };
    assert_eq!(s, kvp_status::Ok, "get_budget");
    // Bit patterns, so a NaN compares equal to itself.
    [
        b.rem_total_tokens.to_bits(),
        b.cur_rem_tokens as u64,
        b.rem_input_tokens as u64,
        b.rem_chunk_tokens as u64,
        u64::from(b.state),
    ]
}

const UNTOUCHED: kvp_admission = kvp_admission {
    admitted: true,
    chunked: true,
    extend_len: 0xDEAD_BEEF,
    next: 77,
};

fn same_admission(a: &kvp_admission, b: &kvp_admission) -> bool {
    a.admitted == b.admitted
        && a.chunked == b.chunked
        && a.extend_len == b.extend_len
        && a.next == b.next
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data, pos: 0 };
    let mut config = kvp_adder_config_default();
    config.page_size = [1, 16, 64, 3][input.byte() as usize % 4];
    if input.byte() < 96 {
        config.page_size = input.value();
    }
    config.max_prefill_tokens = input.value();
    config.chunked_prefill_size = input.value();
    config.num_mixed_decode_tokens = input.value();
    config.clip_max_new_tokens = input.value();
    config.truncation_align_size = input.value() % 4 * 16;
    config.prefill_max_requests = input.value() % 5;
    config.max_chunked_requests = input.value() % 4;
    config.new_token_ratio = input.ratio();
    config.prefix_cache_disabled = input.byte() & 1 == 1;
    let available = input.value();
    let evictable = input.value();
    let running: Vec<kvp_running_request> = (0..input.byte() % 4)
        .map(|_| kvp_running_request {
            input_len: input.value(),
            output_len: input.value(),
            max_new_tokens: input.value(),
            ignore_eos: input.byte() & 1 == 1,
        })
        .collect();
    let null_running = !running.is_empty() && input.byte() < 16;
    let chunked_in_flight = u64::from(input.byte() % 3);

    let invalid = !(config.new_token_ratio.is_finite() && config.new_token_ratio > 0.0)
        || config.page_size == 0
        || config.page_size > I64_MAX
        || config.max_prefill_tokens == 0
        || config.max_prefill_tokens > I64_MAX
        || config.chunked_prefill_size > I64_MAX
        || config.clip_max_new_tokens == 0
        || config.max_chunked_requests == 0
        || config.num_mixed_decode_tokens > I64_MAX
        || u128::from(available) + u128::from(evictable) > u128::from(I64_MAX);
    let want = if null_running {
        kvp_status::NullArgument
    } else if invalid {
        kvp_status::InvalidArgument
    } else {
        kvp_status::Ok
    };
    let sentinel = 0x1000 as *mut kvp_adder;
    let mut adder = sentinel;
    let running_ptr = if null_running {
        ptr::null()
    } else {
        running.as_ptr()
    };
    // SAFETY: `running_ptr` holds `running.len()` entries or is NULL; out writable.
    let got = unsafe {
        kvp_adder_new(
            &config,
            available,
            evictable,
            running_ptr,
            running.len(),
            chunked_in_flight,
            &mut adder,
        )
    };
    assert_eq!(
        got,
        want,
        "kvp_adder_new({config:?}, available {available}, evictable {evictable}, \
         {} running, NULL {null_running})",
        running.len()
    );
    if got != kvp_status::Ok {
        assert_eq!(
            adder, sentinel,
            "failed kvp_adder_new wrote its out-parameter"
        );
        return;
    }

    // A pool, to pass as a handle of the wrong kind.
    let mut pool_config = kvp_pool_config_default();
    pool_config.size = 16;
    let mut pool = ptr::null_mut();
    // SAFETY: valid config and out-pointer.
    assert_eq!(
        unsafe { kvp_pool_new(&pool_config, &mut pool) },
        kvp_status::Ok
    );

    let page = config.page_size;
    let mut steps = 0;
    while !input.done() && steps < 64 {
        steps += 1;
        let before = budget(adder);
        let mut out = UNTOUCHED;
        let null_out = input.byte() < 8;
        let out_ptr: *mut kvp_admission = if null_out { ptr::null_mut() } else { &mut out };
        let (got, want, asked, what) = match input.byte() % 4 {
            0 | 1 => {
                let c = kvp_candidate {
                    input_len: input.value(),
                    prefix_len: input.value(),
                    prefix_evictable: input.value(),
                    max_new_tokens: input.value(),
                    output_len: input.value(),
                    ignore_eos: input.byte() & 1 == 1,
                };
                let null_candidate = input.byte() < 8;
                let want = if null_candidate || null_out {
                    kvp_status::NullArgument
                } else if c.prefix_len > c.input_len
                    || c.prefix_evictable > c.prefix_len
                    || rounded_too_long(u128::from(c.input_len), page)
                {
                    kvp_status::InvalidLengths
                } else {
                    kvp_status::Ok
                };
                let cp: *const kvp_candidate = if null_candidate { ptr::null() } else { &c };
                // SAFETY: live adder; candidate and out NULL or valid.
                let got = unsafe { kvp_adder_add_one_req(adder, cp, out_ptr) };
                let asked = c.input_len.saturating_sub(c.prefix_len);
                (got, want, Some(asked), format!("add_one_req({c:?})"))
            }
            2 => {
                let (prefix, remaining, max_new) = (input.value(), input.value(), input.value());
                let want = if null_out {
                    kvp_status::NullArgument
                } else if rounded_too_long(u128::from(prefix) + u128::from(remaining), page) {
                    kvp_status::InvalidLengths
                } else {
                    kvp_status::Ok
                };
                // SAFETY: live adder; out NULL or valid.
                let got = unsafe {
                    kvp_adder_add_chunked_req(adder, prefix, remaining, max_new, out_ptr)
                };
                let what = format!("add_chunked_req({prefix}, {remaining}, {max_new})");
                if got == kvp_status::Ok && remaining > 0 {
                    assert_eq!(
                        out.chunked,
                        out.extend_len < remaining,
                        "{what}: chunked disagrees with what remains ({out:?})"
                    );
                }
                (got, want, Some(remaining), what)
            }
            _ => {
                // The pool handle where the adder belongs, or a NULL budget.
                let got = if input.byte() & 1 == 0 {
                    // SAFETY: a live handle of another kind is refused by its tag.
                    unsafe { kvp_adder_add_chunked_req(pool.cast(), 0, 1, 1, &mut out) }
                } else {
                    // SAFETY: NULL out-parameter is refused.
                    let s = unsafe { kvp_adder_get_budget(adder, ptr::null_mut()) };
                    assert_eq!(s, kvp_status::NullArgument, "get_budget(NULL)");
                    kvp_status::InvalidArgument
                };
                (
                    got,
                    kvp_status::InvalidArgument,
                    None,
                    "wrong handle".into(),
                )
            }
        };
        assert_ne!(got, kvp_status::Panic, "{what}: KVP_STATUS_PANIC");
        assert_eq!(got, want, "{what}: status");
        if got != kvp_status::Ok {
            assert!(
                same_admission(&out, &UNTOUCHED),
                "{what}: a failing call wrote {out:?}"
            );
        }
        if got != kvp_status::Ok || !out.admitted {
            assert_eq!(
                budget(adder),
                before,
                "{what}: a failing or refused call changed the budget ({out:?})"
            );
        }
        if got == kvp_status::Ok {
            let asked = asked.unwrap_or(u64::MAX);
            assert!(
                out.extend_len <= asked && out.admitted == (out.extend_len > 0)
                    || out.admitted && asked == 0,
                "{what}: admitted {out:?} of {asked}"
            );
        }
    }
    // SAFETY: live handles, not used afterwards.
    unsafe {
        kvp_adder_free(adder);
        kvp_pool_free(pool);
    }
});
