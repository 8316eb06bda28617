//! Fuzzes the C ABI of `kvp_scheduler` (detached: the caller passes the available size)
//! with arbitrary sequences of submit, update_prefix, step, finish, abort and get_request
//! on a few request ids, extreme lengths included, against the contract in
//! `include/kvpool.h`. Phases are read back through `kvp_scheduler_get_request`, so the
//! expected status of each call follows from the scheduler's own state:
//!
//! - submit fails with `KVP_STATUS_NULL_ARGUMENT`, `_INVALID_STATE` (id live) or
//!   `_INVALID_LENGTHS` (documented rules) and otherwise either queues the request
//!   (waiting, `needed < capacity`) or reports it unfittable (not queued, `needed >=
//!   capacity`);
//! - finish needs a running request, abort any live one; both then forget it and report
//!   the KV length `get_request` showed; unknown ids fail with `_INVALID_ARGUMENT`;
//! - update_prefix needs a waiting request; step fails only for NULL or `available +
//!   evictable > INT64_MAX`, and its plan names live requests in the right phases, none
//!   twice, aborted ones gone;
//! - every failing call leaves the counters and every request's state as they were, and
//!   writes no out-parameter; a handle of another kind is refused; nothing panics.
//!
//! - a twin scheduler gets the same calls, but the plain `finish` / `abort` where the
//!   first gets `kvp_scheduler_finish_ex` / `_abort_ex`: statuses, `kv_len` and digests
//!   must agree; `_ex` with a NULL out-parameter is refused and drops nothing;
//!   `kvp_scheduler_digest` is unchanged by refused calls.
//!
//! The scheduling decisions themselves are checked by tests/scheduler_sim.rs.
#![no_main]

use std::collections::HashSet;
use std::ptr;

use kvpool::ffi::*;
use libfuzzer_sys::fuzz_target;

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
        match self.byte() % 16 {
            0 => 0,
            1 => u64::MAX,
            2 => i64::MAX as u64,
            3 => i64::MAX as u64 + 1,
            4 => 1 << (self.byte() % 64),
            5..=9 => u64::from(self.byte()) * 8 + u64::from(self.byte() % 8),
            _ => u64::from(self.byte() % 64),
        }
    }
}

const IDS: u64 = 6;
const I64_MAX: u64 = i64::MAX as u64;
const PHASE_WAITING: u32 = 0;
const PHASE_CHUNKING: u32 = 1;
const PHASE_RUNNING: u32 = 2;

/// A live request's phase, KV length and output length; `None` for an unknown id.
type ReqState = Option<(u32, u64, u64)>;

struct Sched {
    s: *mut kvp_scheduler,
    capacity: u64,
}

impl Sched {
    fn state(&self, id: u64) -> ReqState {
        let mut st = kvp_request_state {
            phase: 99,
            kv_len: 1,
            output_len: 2,
        };
        // SAFETY: live scheduler, writable out-parameter.
        match unsafe { kvp_scheduler_get_request(self.s, id, &mut st) } {
            kvp_status::Ok => Some((st.phase, st.kv_len, st.output_len)),
            kvp_status::InvalidArgument => {
                assert!(st.phase == 99 && st.kv_len == 1, "failed get_request wrote");
                None
            }
            other => panic!("get_request({id}): {other:?}"),
        }
    }

    fn digest(&self) -> u64 {
        let mut d = 0u64;
        // SAFETY: live scheduler, writable out-parameter.
        let status = unsafe { kvp_scheduler_digest(self.s, &mut d) };
        assert_eq!(status, kvp_status::Ok, "scheduler_digest");
        d
    }

    /// Everything observable: the counters (bit patterns) and every id's state.
    fn observe(&self) -> (Vec<u64>, Vec<ReqState>) {
        let mut st = std::mem::MaybeUninit::<kvp_scheduler_stats>::zeroed();
        // SAFETY: live scheduler, writable out-parameter.
        let status = unsafe { kvp_scheduler_get_stats(self.s, st.as_mut_ptr()) };
        assert_eq!(status, kvp_status::Ok, "get_stats");
        // SAFETY: written by the successful call.
        let st = unsafe { st.assume_init() };
        let counters = vec![
            st.steps,
            st.prefill_steps,
            st.decode_steps,
            st.admitted,
            st.chunks,
            st.retractions,
            st.preemptions,
            st.aborts,
            st.unfittable,
            st.finished,
            st.waiting,
            st.chunking,
            st.running,
            st.new_token_ratio.to_bits(),
        ];
        (counters, (0..IDS).map(|id| self.state(id)).collect())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data, pos: 0 };
    let mut config = kvp_scheduler_config_default();
    let page = [1u64, 4, 16][input.byte() as usize % 3];
    config.page_size = page;
    config.capacity = page * (1 + u64::from(input.byte() % 64));
    config.chunked_prefill_size = [0, 64, 256, 1024][input.byte() as usize % 4];
    config.policy = u32::from(input.byte() % 3);
    config.enable_priority = input.byte() & 1 == 1;
    config.enable_mixed_chunk = input.byte() & 1 == 1;
    config.max_chunked_requests = 1 + u64::from(input.byte() % 2);
    let mut s = ptr::null_mut();
    // SAFETY: valid config and out-pointer; no pool.
    let status = unsafe { kvp_scheduler_new(&config, ptr::null_mut(), &mut s) };
    assert_eq!(status, kvp_status::Ok, "kvp_scheduler_new({config:?})");
    let sched = Sched {
        s,
        capacity: config.capacity,
    };
    // A twin of the same configuration, given the same calls except that where `sched`
    // gets `kvp_scheduler_finish_ex` / `_abort_ex` the twin gets the plain call (same
    // checks and effect, header): the two must report the same and keep equal digests.
    let mut t = ptr::null_mut();
    // SAFETY: valid config and out-pointer; no pool.
    let status = unsafe { kvp_scheduler_new(&config, ptr::null_mut(), &mut t) };
    assert_eq!(status, kvp_status::Ok, "kvp_scheduler_new (twin)");
    let twin = Sched {
        s: t,
        capacity: config.capacity,
    };
    let mut pool_config = kvp_pool_config_default();
    pool_config.size = 8;
    let mut pool = ptr::null_mut();
    // SAFETY: valid config and out-pointer.
    assert_eq!(
        unsafe { kvp_pool_new(&pool_config, &mut pool) },
        kvp_status::Ok
    );

    let mut steps = 0;
    while !input.done() && steps < 200 {
        steps += 1;
        let before = sched.observe();
        let digest_before = sched.digest();
        assert_eq!(
            sched.digest(),
            digest_before,
            "two digests with no call between"
        );
        let id = u64::from(input.byte()) % IDS;
        let live = before.1[id as usize];
        let (got, allowed, what): (kvp_status, Vec<kvp_status>, String) = match input.byte() % 8 {
            0 | 1 => {
                let r = kvp_request {
                    id,
                    input_len: input.value(),
                    prefix_len: input.value(),
                    prefix_evictable: input.value(),
                    max_new_tokens: input.value(),
                    output_len: input.value(),
                    priority: i64::from(input.byte() as i8),
                    ignore_eos: input.byte() & 1 == 1,
                };
                let null = input.byte() % 16;
                let fill = r.input_len.checked_add(r.output_len);
                let bad_lengths = r.input_len == 0
                    || fill.is_none_or(|f| r.prefix_len >= f)
                    || r.prefix_evictable > r.prefix_len;
                let allowed = if null < 2 {
                    vec![kvp_status::NullArgument]
                } else {
                    match (live.is_some(), bad_lengths) {
                        (true, true) => vec![kvp_status::InvalidState, kvp_status::InvalidLengths],
                        (true, false) => vec![kvp_status::InvalidState],
                        (false, true) => vec![kvp_status::InvalidLengths],
                        (false, false) => vec![kvp_status::Ok],
                    }
                };
                let mut out = kvp_submit_result {
                    queued: true,
                    needed: 7,
                    capacity: 7,
                };
                let rp: *const kvp_request = if null == 0 { ptr::null() } else { &r };
                let op: *mut kvp_submit_result = if null == 1 { ptr::null_mut() } else { &mut out };
                // SAFETY: live scheduler; request and out NULL or valid; no path.
                let got = unsafe { kvp_scheduler_submit(sched.s, rp, ptr::null(), 0, op) };
                let mut twin_out = out;
                let top: *mut kvp_submit_result = if null == 1 {
                    ptr::null_mut()
                } else {
                    &mut twin_out
                };
                // SAFETY: as above, on the twin.
                let twin_got = unsafe { kvp_scheduler_submit(twin.s, rp, ptr::null(), 0, top) };
                assert_eq!(twin_got, got, "twin submit({r:?})");
                let what = format!("submit({r:?})");
                if got == kvp_status::Ok {
                    let now = sched.state(id);
                    assert_eq!(out.capacity, sched.capacity, "{what}: capacity");
                    if out.queued {
                        // Admission compares strictly, as SGLang's budget does (`needed`
                        // equal to the capacity can never be admitted).
                        assert!(out.needed < sched.capacity, "{what}: queued {out:?}");
                        assert_eq!(now.map(|s| s.0), Some(PHASE_WAITING), "{what}");
                    } else {
                        assert!(out.needed >= sched.capacity, "{what}: unfittable {out:?}");
                        assert_eq!(now, None, "{what}: an unfittable request was kept");
                    }
                } else {
                    assert!(out.queued && out.needed == 7, "{what}: failed submit wrote");
                }
                (got, allowed, what)
            }
            2 => {
                let (prefix, evictable) = (input.value(), input.value());
                let allowed = match live {
                    None => vec![kvp_status::InvalidArgument],
                    Some((PHASE_WAITING, ..)) if evictable > prefix => {
                        vec![kvp_status::InvalidLengths]
                    }
                    Some((PHASE_WAITING, ..)) => vec![kvp_status::Ok, kvp_status::InvalidLengths],
                    Some(_) => vec![kvp_status::InvalidState, kvp_status::InvalidLengths],
                };
                // SAFETY: live scheduler; NULL path with length 0 keeps the old one.
                let got = unsafe {
                    kvp_scheduler_update_prefix(sched.s, id, prefix, evictable, ptr::null(), 0)
                };
                // SAFETY: as above, on the twin.
                let twin_got = unsafe {
                    kvp_scheduler_update_prefix(twin.s, id, prefix, evictable, ptr::null(), 0)
                };
                assert_eq!(twin_got, got, "twin update_prefix");
                (
                    got,
                    allowed,
                    format!("update_prefix({id}, {prefix}, {evictable})"),
                )
            }
            3 | 4 => {
                let (available, evictable) = (input.value(), input.value());
                let allow_prefill = !input.byte().is_multiple_of(8);
                let null = input.byte() < 8;
                let allowed = if null {
                    vec![kvp_status::NullArgument]
                } else if u128::from(available) + u128::from(evictable) > u128::from(I64_MAX) {
                    vec![kvp_status::InvalidArgument]
                } else {
                    vec![kvp_status::Ok]
                };
                let mut plan = std::mem::MaybeUninit::<kvp_step_plan>::zeroed();
                let pp = if null {
                    ptr::null_mut()
                } else {
                    plan.as_mut_ptr()
                };
                // SAFETY: live scheduler; out NULL or writable.
                let got =
                    unsafe { kvp_scheduler_step(sched.s, available, evictable, allow_prefill, pp) };
                let mut twin_plan = std::mem::MaybeUninit::<kvp_step_plan>::zeroed();
                let tp = if null {
                    ptr::null_mut()
                } else {
                    twin_plan.as_mut_ptr()
                };
                // SAFETY: as above, on the twin.
                let twin_got =
                    unsafe { kvp_scheduler_step(twin.s, available, evictable, allow_prefill, tp) };
                assert_eq!(twin_got, got, "twin step");
                let what = format!("step({available}, {evictable}, {allow_prefill})");
                if got == kvp_status::Ok {
                    // SAFETY: written by the successful call; its arrays live until the
                    // next step.
                    check_plan(&sched, unsafe { &plan.assume_init() }, &what);
                }
                (got, allowed, what)
            }
            5 => {
                let allowed = match live {
                    None => vec![kvp_status::InvalidArgument],
                    Some((PHASE_RUNNING, ..)) => vec![kvp_status::Ok],
                    Some(_) => vec![kvp_status::InvalidState],
                };
                let variant = input.byte() % 4;
                let got = finish_or_abort(&sched, &twin, id, live, variant, false);
                let allowed = if variant == 3 {
                    vec![kvp_status::NullArgument]
                } else {
                    allowed
                };
                (got, allowed, format!("finish({id}) variant {variant}"))
            }
            6 => {
                let allowed = match live {
                    None => vec![kvp_status::InvalidArgument],
                    Some(_) => vec![kvp_status::Ok],
                };
                let variant = input.byte() % 4;
                let got = finish_or_abort(&sched, &twin, id, live, variant, true);
                let allowed = if variant == 3 {
                    vec![kvp_status::NullArgument]
                } else {
                    allowed
                };
                (got, allowed, format!("abort({id}) variant {variant}"))
            }
            _ => {
                // Wrong-kind handle and NULL out-parameters.
                // SAFETY: a live handle of another kind is refused by its tag; NULL
                // out-parameters are refused.
                let got = unsafe {
                    match input.byte() % 6 {
                        0 => kvp_scheduler_abort(pool.cast(), id, ptr::null_mut()),
                        3 => {
                            let mut fin = FIN_SENTINEL;
                            let s = kvp_scheduler_finish_ex(pool.cast(), id, &mut fin);
                            assert!(untouched(&fin), "refused finish_ex wrote");
                            s
                        }
                        4 => {
                            let mut d = 77u64;
                            let s = kvp_scheduler_digest(sched.s, ptr::null_mut());
                            assert_eq!(s, kvp_status::NullArgument, "digest(NULL out)");
                            let s = kvp_scheduler_digest(ptr::null(), &mut d);
                            assert_eq!(s, kvp_status::NullArgument, "digest(NULL)");
                            let s = kvp_scheduler_digest(pool.cast(), &mut d);
                            assert_eq!(d, 77, "refused digest wrote");
                            s
                        }
                        5 => {
                            let mut fin = FIN_SENTINEL;
                            let s = kvp_scheduler_abort_ex(ptr::null_mut(), id, &mut fin);
                            assert_eq!(s, kvp_status::NullArgument, "abort_ex(NULL)");
                            assert!(untouched(&fin), "refused abort_ex wrote");
                            kvp_status::InvalidArgument
                        }
                        1 => {
                            let s = kvp_scheduler_get_request(sched.s, id, ptr::null_mut());
                            assert_eq!(s, kvp_status::NullArgument, "get_request(NULL)");
                            kvp_status::InvalidArgument
                        }
                        _ => {
                            let s = kvp_scheduler_get_stats(sched.s, ptr::null_mut());
                            assert_eq!(s, kvp_status::NullArgument, "get_stats(NULL)");
                            kvp_status::InvalidArgument
                        }
                    }
                };
                (
                    got,
                    vec![kvp_status::InvalidArgument],
                    "wrong handle".into(),
                )
            }
        };
        assert_ne!(got, kvp_status::Panic, "{what}: KVP_STATUS_PANIC");
        assert!(
            allowed.contains(&got),
            "{what}: status {got:?}, expected one of {allowed:?} (state before {live:?})"
        );
        if got != kvp_status::Ok {
            assert_eq!(
                sched.observe(),
                before,
                "{what}: a failing call changed the scheduler"
            );
            assert_eq!(
                sched.digest(),
                digest_before,
                "{what}: a failing call changed the scheduler's digest"
            );
        }
        assert_eq!(
            sched.digest(),
            twin.digest(),
            "{what}: the twin (plain finish/abort) has another digest"
        );
        assert_eq!(
            sched.observe(),
            twin.observe(),
            "{what}: the twin disagrees"
        );
    }
    // SAFETY: live handles, not used afterwards.
    unsafe {
        kvp_scheduler_free(sched.s);
        kvp_scheduler_free(twin.s);
        kvp_pool_free(pool);
    }
});

const FIN_SENTINEL: kvp_finished = kvp_finished {
    id: 0xAAAA,
    kv_len: 0xBBBB,
    prefix_len: 0xCCCC,
    prefix_evictable: 0xDDDD,
};

fn untouched(fin: &kvp_finished) -> bool {
    format!("{fin:?}") == format!("{FIN_SENTINEL:?}")
}

/// Finishes (or aborts) `id` on `sched` one of four ways and on `twin` with the plain
/// call: 0 plain, 1 and 2 `_ex`, 3 `_ex` with a NULL out-parameter (refused whatever the
/// id; the twin is then not called). The `_ex` report must agree with the plain call's
/// status and `out_kv_len`, with what `get_request` showed before, and with the header's
/// rules for `kvp_finished`.
fn finish_or_abort(
    sched: &Sched,
    twin: &Sched,
    id: u64,
    live: ReqState,
    variant: u8,
    abort: bool,
) -> kvp_status {
    let what = if abort { "abort" } else { "finish" };
    let plain = |s: &Sched, kv: &mut u64| {
        // SAFETY: live scheduler, writable out-parameter.
        unsafe {
            if abort {
                kvp_scheduler_abort(s.s, id, kv)
            } else {
                kvp_scheduler_finish(s.s, id, kv)
            }
        }
    };
    let ex = |s: &Sched, fin: *mut kvp_finished| {
        // SAFETY: live scheduler; out NULL or writable.
        unsafe {
            if abort {
                kvp_scheduler_abort_ex(s.s, id, fin)
            } else {
                kvp_scheduler_finish_ex(s.s, id, fin)
            }
        }
    };
    if variant == 3 {
        let got = ex(sched, ptr::null_mut());
        assert_eq!(
            sched.state(id),
            live,
            "{what}_ex({id}, NULL) changed the request"
        );
        return got;
    }
    let mut twin_kv = 12345u64;
    let twin_got = plain(twin, &mut twin_kv);
    check_gone(twin, id, twin_got, live, twin_kv, what);
    if variant == 0 {
        let mut kv = 12345u64;
        let got = plain(sched, &mut kv);
        check_gone(sched, id, got, live, kv, what);
        assert_eq!((got, kv), (twin_got, twin_kv), "{what}({id}) vs the twin");
        return got;
    }
    let mut fin = FIN_SENTINEL;
    let got = ex(sched, &mut fin);
    assert_eq!(got, twin_got, "{what}_ex({id}): status vs plain {what}");
    if got == kvp_status::Ok {
        assert_eq!(sched.state(id), None, "{what}_ex({id}) kept the request");
        assert_eq!(fin.id, id, "{what}_ex({id}): id {fin:?}");
        assert_eq!(
            fin.kv_len, twin_kv,
            "{what}_ex({id}): kv_len vs plain {fin:?}"
        );
        assert!(
            fin.prefix_evictable <= fin.prefix_len && fin.prefix_len <= fin.kv_len,
            "{what}_ex({id}): {fin:?}"
        );
        if live.map(|s| s.0) == Some(PHASE_WAITING) {
            assert!(
                fin.kv_len == 0 && fin.prefix_len == 0 && fin.prefix_evictable == 0,
                "{what}_ex({id}) of a waiting request: {fin:?}"
            );
        }
    } else {
        assert!(untouched(&fin), "failed {what}_ex({id}) wrote {fin:?}");
    }
    got
}

/// After finish/abort: a success forgets the request and reports its KV length; a failure
/// writes nothing.
fn check_gone(sched: &Sched, id: u64, got: kvp_status, live: ReqState, kv: u64, what: &str) {
    if got == kvp_status::Ok {
        assert_eq!(sched.state(id), None, "{what}({id}) kept the request");
        assert_eq!(Some(kv), live.map(|s| s.1), "{what}({id}): kv_len");
    } else {
        assert_eq!(kv, 12345, "failed {what}({id}) wrote its out-parameter");
    }
}

/// A plan names live requests in the phase it puts them in, each at most once; retracted
/// and preempted requests are waiting again, aborted ones gone.
fn check_plan(sched: &Sched, plan: &kvp_step_plan, what: &str) {
    let slice = |p: *const kvp_evicted, n: usize| -> Vec<kvp_evicted> {
        if n == 0 {
            return Vec::new();
        }
        // SAFETY: the plan's arrays hold their stated counts until the next step.
        unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
    };
    let mut seen = HashSet::new();
    if plan.num_prefill > 0 {
        // SAFETY: as above.
        let prefill = unsafe { std::slice::from_raw_parts(plan.prefill, plan.num_prefill) };
        for e in prefill {
            assert!(seen.insert(e.id), "{what}: id {} twice in the plan", e.id);
            assert!(e.extend_len > 0, "{what}: empty prefill entry {e:?}");
            let phase = sched.state(e.id).map(|s| s.0);
            let want = if e.chunked {
                PHASE_CHUNKING
            } else {
                PHASE_RUNNING
            };
            assert_eq!(phase, Some(want), "{what}: prefill entry {e:?}");
        }
    }
    if plan.num_decode > 0 {
        // SAFETY: as above.
        let decode = unsafe { std::slice::from_raw_parts(plan.decode, plan.num_decode) };
        for &id in decode {
            assert!(seen.insert(id), "{what}: id {id} twice in the plan");
            assert_eq!(
                sched.state(id).map(|s| s.0),
                Some(PHASE_RUNNING),
                "{what}: decode id {id}"
            );
        }
    }
    for e in slice(plan.retracted, plan.num_retracted)
        .into_iter()
        .chain(slice(plan.preempted, plan.num_preempted))
    {
        assert!(seen.insert(e.id), "{what}: id {} twice in the plan", e.id);
        assert!(e.prefix_len <= e.kv_len, "{what}: evicted {e:?}");
        assert_eq!(
            sched.state(e.id).map(|s| s.0),
            Some(PHASE_WAITING),
            "{what}: evicted {e:?}"
        );
    }
    for e in slice(plan.aborted, plan.num_aborted) {
        assert!(seen.insert(e.id), "{what}: id {} twice in the plan", e.id);
        assert_eq!(sched.state(e.id), None, "{what}: aborted {e:?} still live");
    }
}
