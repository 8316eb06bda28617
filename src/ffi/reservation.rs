//! `kvp_decode_reservation`: multi-step decode reservations (issue 11), whose steps can run
//! inside a captured CUDA graph on a device pool.

use std::ffi::c_void;
use std::sync::Arc;

use super::boundary::{fail, ffi_boundary, status_of, status_of_error};
use super::buffers::{disjoint, index_span, input, input_indices, output_indices, span};
use super::device::{check_device_ptr, device_ptr, index_align, stream_of, CUstream_st};
use super::handle::{into_raw, release, share, with_raw, Guarded, HandleKind};
use super::pool::{kvp_pool, PoolObject};
use super::rows::{device_table, host_table, kvp_req_table, table_of, table_span, table_span_of};
use super::status::kvp_status;
use crate::cuda::{DeviceReservation, RestoreContext};
use crate::pool::{DecodeReservation, IndexType, Pool, PoolOp, SlotIndex};

/// A reservation of `K` decode steps of a fixed batch, made by `kvp_pool_reserve_decode`
/// (host pool) or `kvp_pool_reserve_decode_async` (device pool), stepped by
/// `kvp_decode_reservation_step[_async]`, ended by `kvp_decode_reservation_finish[_async]`
/// and released by `kvp_decode_reservation_free`. It keeps its pool alive.
///
/// Thread safety: like every handle (calls serialized by a lock; a call also takes its
/// pool's lock, after the reservation's).
pub struct kvp_decode_reservation {
    _private: [u8; 0],
}

/// What a `kvp_decode_reservation *` points to.
pub(crate) struct ReservationObject {
    pool: Arc<Guarded<PoolObject>>,
    inner: Inner,
}

enum Inner {
    Host(DecodeReservation),
    /// `None` once released into the pool's spares (only at free).
    Device(Option<DeviceReservation>),
}

impl HandleKind for ReservationObject {
    const NAME: &'static str = "kvp_decode_reservation";
    const TAG: u64 = u64::from_le_bytes(*b"kvp_resv");
}

impl Drop for ReservationObject {
    fn drop(&mut self) {
        // An unfinished host reservation ends its holds here (its pages stay allocated).
        if let Inner::Host(res) = &mut self.inner {
            self.pool.with(|object| {
                if let PoolObject::Host(pool) = object {
                    pool.abandon_reservation(res);
                }
                kvp_status::Ok
            });
        }
        // The device memory goes back to the pool for later reservations (its queued kernels
        // are ordered before every later call of the pool; an unfinished reservation's holds
        // end in the pool's next call). Also to a poisoned pool: dropped here, the memory
        // would be freed at once under kernels that may still be queued; the pool frees it
        // stream-ordered with its own.
        if let Inner::Device(res) = &mut self.inner {
            if let Some(res) = res.take() {
                let _restore = RestoreContext::save();
                self.pool.with_for_release(|object| {
                    if let PoolObject::Device(pool) = object {
                        pool.release_reservation(res);
                    }
                });
            }
        }
    }
}

/// Runs `body` with the reservation's pool locked (and its context bound for a device pool,
/// the caller's restored afterwards).
fn with_pool_of(
    pool: &Guarded<PoolObject>,
    body: impl FnOnce(&mut PoolObject) -> kvp_status,
) -> kvp_status {
    pool.with(|object| {
        let _restore = matches!(object, PoolObject::Device(_)).then(RestoreContext::save);
        body(object)
    })
}

fn with_reservation(
    reservation: *const kvp_decode_reservation,
    body: impl FnOnce(&mut ReservationObject) -> kvp_status,
) -> kvp_status {
    with_raw::<ReservationObject, kvp_decode_reservation>(reservation, "reservation", body)
}

/// Shares the pool behind `pool` and checks `out_reservation`.
///
/// # Safety
/// `pool` NULL or a live handle.
unsafe fn start(
    pool: *mut kvp_pool,
    out_reservation: *mut *mut kvp_decode_reservation,
) -> Result<Arc<Guarded<PoolObject>>, kvp_status> {
    if out_reservation.is_null() {
        return Err(fail(kvp_status::NullArgument, "out_reservation is NULL"));
    }
    // SAFETY: forwarded caller contract.
    unsafe { share::<PoolObject, kvp_pool>(pool, "pool") }
}

fn hand_out(
    shared: Arc<Guarded<PoolObject>>,
    inner: Inner,
    out_reservation: *mut *mut kvp_decode_reservation,
) {
    let handle = Guarded::new(ReservationObject {
        pool: shared,
        inner,
    });
    // SAFETY: checked non-NULL in `start`; writable (caller contract).
    unsafe { *out_reservation = into_raw(handle) };
}

unsafe fn reserve_typed<I: SlotIndex>(
    pool: &mut Pool,
    lens: &[i64],
    last_loc: *const c_void,
    batch_size: usize,
    steps: u32,
) -> Result<DecodeReservation, kvp_status> {
    // SAFETY: forwarded caller contract of `kvp_pool_reserve_decode`.
    let last_loc = match unsafe { input_indices::<I>(last_loc, batch_size, "last_loc") } {
        Ok(last) => last,
        Err(status) => {
            pool.record_refused(PoolOp::Reservation);
            return Err(status);
        }
    };
    pool.reserve_decode(lens, last_loc, steps)
        .map_err(status_of_error)
}

/// Reserves `steps` decode steps of a batch on a host pool and writes the new reservation
/// to `*out_reservation` (release it with `kvp_decode_reservation_free`).
///
/// `lens[i]` is the number of tokens request `i` holds now (the first reserved step makes it
/// `lens[i] + 1`: `kvp_pool_alloc_decode`'s `seq_lens - 1`); `last_loc[i]` the slot of its
/// last token (`-1` when `lens[i] == 0`). Request `i` needs
/// `ceil((lens[i] + steps) / page_size) - ceil(lens[i] / page_size)` new pages; they are
/// taken now, in exactly the order `steps` successive `kvp_pool_alloc_decode` calls would
/// take them (step 1's new pages in request order, then step 2's, ...), and the slots of
/// every step are computed now. The pages' fill points advance as if every step ran.
///
/// Until the reservation ends (finish, free, clear, restore) every page its steps hand slots
/// out of — the new pages and each request's partly filled last page — is *held*: a free
/// naming it (by index, page id, segment or row), a `kvp_pool_rewind` into it and a
/// continuation from it (a plain `kvp_pool_alloc_decode` / `_extend` / another reservation
/// whose `last_loc` lies in it) fail with `KVP_STATUS_INVALID_STATE` and change nothing (on
/// a device pool: a fault). So a request of the batch cannot be freed, and its page handed
/// to another request, while later steps still hand out that page's slots.
///
/// Staged (`need_sort`) frees are merged where the `steps` plain decodes would merge them:
/// before the first step whose batch size exceeds the free list the earlier steps left
/// (SGLang's per-call rule), so every step's slots equal theirs.
///
/// Checked, nothing changed on failure: `1 <= steps <= 1024` (`KVP_STATUS_INVALID_ARGUMENT`),
/// `0 <= lens[i]` and `lens[i] + steps <= size` (`KVP_STATUS_INVALID_LENGTHS`), each
/// `last_loc` as `kvp_pool_alloc_decode` checks it, and the shortage
/// (`KVP_STATUS_OUT_OF_SLOTS`, exactly when one of the plain decodes would run short; not
/// even a merge happens then). Counts in the stats as `batch_size * steps` tokens and the
/// pages taken (no decode call). Other calls on the pool work normally while the
/// reservation is live.
///
/// # Safety
/// `pool` a live pool or NULL; `lens` (`int64_t`) and `last_loc` (the pool's index type)
/// NULL or valid for `batch_size` elements; `out_reservation` writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_pool_reserve_decode(
    pool: *mut kvp_pool,
    lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    steps: u32,
    out_reservation: *mut *mut kvp_decode_reservation,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: forwarded caller contract.
        let shared = tri!(unsafe { start(pool, out_reservation) });
        let mut made = None;
        let status = with_pool_of(&shared, |object| {
            let PoolObject::Host(pool) = object else {
                return fail(
                    kvp_status::WrongBackend,
                    "this is a device pool (KVP_BACKEND_CUDA): use kvp_pool_reserve_decode_async",
                );
            };
            // SAFETY: forwarded caller contract.
            let lens = buffer!(pool, PoolOp::Reservation, unsafe {
                input(lens, batch_size, "lens")
            });
            // SAFETY: forwarded caller contract.
            let result = unsafe {
                match pool.config().index_type {
                    IndexType::I64 => reserve_typed::<i64>(pool, lens, last_loc, batch_size, steps),
                    IndexType::I32 => reserve_typed::<i32>(pool, lens, last_loc, batch_size, steps),
                }
            };
            match result {
                Ok(res) => {
                    made = Some(res);
                    kvp_status::Ok
                }
                Err(status) => status,
            }
        });
        if let Some(res) = made {
            hand_out(shared, Inner::Host(res), out_reservation);
        }
        status
    })
}

/// Enqueues a reservation of `steps` decode steps of a batch on `stream` (device pool) and
/// writes the new reservation to `*out_reservation`: the device-pool form of
/// `kvp_pool_reserve_decode` (same semantics, page order and statuses). `lens_host` is the
/// host copy of the device array `lens` (`int64_t`, tokens each request holds now), from
/// which the host validates, plans the pages and checks the shortage before anything is
/// enqueued; `last_loc` is a device array of the pool's index type.
///
/// Enqueues one kernel (with `need_sort`: a merge before it when the first step would merge;
/// when a later step would, two reserve kernels with the merge between them), one block of
/// 1,024 threads, that checks every `last_loc` as `kvp_pool_alloc_decode_async`'s
/// kernel does, takes the planned pages, computes the `steps x batch_size` slot table into
/// device memory the reservation owns (with a copy of `lens`) and advances the fill points.
/// A bad `last_loc`, or device lengths that disagree with the host copy, fault the pool
/// (nothing taken; the reservation's steps then write the padding slot 0). (Device lengths
/// that give the host's page total but place some first pages at other steps are caught by
/// the finish: it then returns nothing and faults the pool, since the pages the used steps
/// took differ from the host's plan.) The first
/// reservations allocate device memory (`cuMemAlloc`, which may synchronize); memory of
/// freed reservations is reused. While `stream` is being captured a reservation that finds
/// no spare memory large enough is refused (`KVP_STATUS_INVALID_STATE`, nothing done, the
/// capture intact): make and free one as large before capturing. `lens` and `last_loc`
/// must stay alive until the stream passes the call; the reservation does not need them
/// afterwards.
///
/// # Safety
/// `lens_host` valid for `batch_size` elements; `lens`, `last_loc` device memory of the
/// pool's device for `batch_size` elements; `out_reservation` writable; `stream` a live
/// stream of the pool's device's primary context, or NULL.
#[no_mangle]
#[must_use]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kvp_pool_reserve_decode_async(
    pool: *mut kvp_pool,
    lens_host: *const i64,
    lens: *const i64,
    last_loc: *const c_void,
    batch_size: usize,
    steps: u32,
    out_reservation: *mut *mut kvp_decode_reservation,
    stream: *mut CUstream_st,
) -> kvp_status {
    ffi_boundary(|| {
        // SAFETY: forwarded caller contract.
        let shared = tri!(unsafe { start(pool, out_reservation) });
        let mut made = None;
        let status = with_pool_of(&shared, |object| {
            let PoolObject::Device(pool) = object else {
                return fail(
                    kvp_status::WrongBackend,
                    "this is a host pool (KVP_BACKEND_HOST): use kvp_pool_reserve_decode",
                );
            };
            // SAFETY: forwarded caller contract.
            let host = tri!(unsafe { input(lens_host, batch_size, "lens_host") });
            tri!(check_device_ptr(lens.cast(), batch_size, 8, "lens"));
            tri!(check_device_ptr(
                last_loc,
                batch_size,
                index_align(pool),
                "last_loc"
            ));
            // SAFETY: forwarded caller contract.
            let result = unsafe {
                pool.reserve_decode(
                    host,
                    device_ptr(lens),
                    device_ptr(last_loc),
                    steps,
                    stream_of(stream),
                )
            };
            match result {
                Ok(res) => {
                    made = Some(res);
                    kvp_status::Ok
                }
                Err(err) => status_of(Err(err)),
            }
        });
        if let Some(res) = made {
            hand_out(shared, Inner::Device(Some(res)), out_reservation);
        }
        status
    })
}

unsafe fn step_typed<I: SlotIndex, T: SlotIndex>(
    pool: &mut Pool,
    res: &mut DecodeReservation,
    out: *mut c_void,
    out_len: usize,
    table: Option<(kvp_req_table, crate::pool::TableShape)>,
    rows: *const i64,
) -> kvp_status {
    let batch = res.batch();
    let table_mem = table
        .as_ref()
        .map_or((std::ptr::null(), 0, "table.data"), |(t, shape)| {
            table_span::<T>(t, shape)
        });
    let rows_mem = span(rows, if table.is_some() { batch } else { 0 }, "rows");
    // A step refused for its buffers counts as a rejected call, as a pool call does.
    buffer!(
        pool,
        PoolOp::Reservation,
        disjoint(
            &[
                span(out.cast_const().cast::<I>(), out_len, "out"),
                table_mem
            ],
            &[rows_mem],
        )
    );
    let out = if out.is_null() && table.is_some() {
        None
    } else {
        // SAFETY: forwarded caller contract.
        Some(buffer!(pool, PoolOp::Reservation, unsafe {
            output_indices::<I>(out, out_len, "out")
        }))
    };
    match table {
        None => status_of(pool.reservation_step(res, out.unwrap_or(&mut []))),
        Some((t, shape)) => {
            // SAFETY: forwarded caller contract.
            let rows = buffer!(pool, PoolOp::Reservation, unsafe {
                input(rows, batch, "rows")
            });
            // SAFETY: forwarded caller contract.
            let mut table = buffer!(pool, PoolOp::Reservation, unsafe {
                host_table::<T>(&t, shape)
            });
            status_of(pool.reservation_step_rows(res, &mut table, rows, out))
        }
    }
}

/// The next step of a host pool's reservation: writes its slots (exactly what the
/// corresponding `kvp_pool_alloc_decode` would return) to `out[0 .. batch_size)` and, when
/// `table` is not NULL, each slot `i` to `table[rows[i]][lens[i] + s]` for step `s`
/// (0-based; `rows` a host array of `batch_size` `int64_t`, distinct rows of the table,
/// `lens[i] + s < row_len`). `out` may be NULL when a table is given. Past the reservation
/// (all `steps` taken, or finished): `KVP_STATUS_INVALID_STATE`, nothing written; a
/// reservation from before a `kvp_pool_clear` / `kvp_pool_restore_state` of its pool: the
/// same. Buffers are only used during the call.
///
/// # Safety
/// `reservation` a live reservation or NULL; `out` NULL or valid for `out_len` elements of
/// the pool's index type; `table` NULL or a descriptor of host memory spanning its shape;
/// `rows` NULL or valid for `batch_size` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_decode_reservation_step(
    reservation: *mut kvp_decode_reservation,
    out: *mut c_void,
    out_len: usize,
    table: *const kvp_req_table,
    rows: *const i64,
) -> kvp_status {
    with_reservation(reservation, |object| {
        let Inner::Host(res) = &mut object.inner else {
            return fail(
                kvp_status::WrongBackend,
                "this is a device pool's reservation: use kvp_decode_reservation_step_async",
            );
        };
        with_pool_of(&object.pool, |pool| {
            let PoolObject::Host(pool) = pool else {
                return fail(
                    kvp_status::WrongBackend,
                    "the reservation's pool is a device pool",
                );
            };
            let table = if table.is_null() {
                None
            } else {
                Some(buffer!(pool, PoolOp::Reservation, table_of(table)))
            };
            let (t, index) = match table {
                Some((t, shape, index)) => (Some((t, shape)), index),
                None => (None, IndexType::I64),
            };
            // SAFETY: forwarded caller contract.
            unsafe {
                match (pool.config().index_type, index) {
                    (IndexType::I64, IndexType::I64) => {
                        step_typed::<i64, i64>(pool, res, out, out_len, t, rows)
                    }
                    (IndexType::I64, IndexType::I32) => {
                        step_typed::<i64, i32>(pool, res, out, out_len, t, rows)
                    }
                    (IndexType::I32, IndexType::I64) => {
                        step_typed::<i32, i64>(pool, res, out, out_len, t, rows)
                    }
                    (IndexType::I32, IndexType::I32) => {
                        step_typed::<i32, i32>(pool, res, out, out_len, t, rows)
                    }
                }
            }
        })
    })
}

/// Enqueues the next step of a device pool's reservation on `stream`: ONE kernel (one
/// block of up to 1,024 threads) that reads the reservation's step counter `s` (in device
/// memory), writes slot row `s` to `out[0 .. batch_size)` (device, the pool's index type;
/// may be NULL when a table is given) and, when `table` is not NULL, each slot `i` to
/// `table[rows[i]][lens[i] + s]` (`table` device memory, `rows` a device array of
/// `batch_size` `int64_t` naming distinct rows), then increments the counter.
///
/// Capturable: the call changes no host state, never synchronizes, allocates nothing, and
/// its kernel's arguments are fixed, so it may be recorded by stream capture
/// (`cudaStreamBeginCapture`) and the graph replayed once per step: `steps` replays give
/// exactly the slots `steps` uncaptured `kvp_pool_alloc_decode_async` calls would give on an
/// identical pool. Calling it again uncaptured is equally valid (each call is one step).
/// Launches inside a capture are not tracked for the pool's stream-ordered release: finish
/// a graph's replays before `kvp_pool_free`. The stream-order debug check does not cover
/// steps (they are ordered by the engine's graph).
///
/// Running past the reservation never allocates: a step that finds all `steps` taken (or
/// the reservation finished) writes the padding slot 0 to `out`, writes no table entry,
/// leaves the counter and faults the pool (`KVP_STATUS_DEVICE_FAULT`, the message names the
/// reservation overrun); so does a step replayed after a clear or restore of the pool,
/// which ended the reservation and freed its pages. A row outside the table faults
/// likewise. A step of a faulted pool writes 0 and does nothing else. Rows are not checked
/// for repeats on the device (each step would need a barrier over a table of marks): a
/// repeated row gets two requests' slots written into one row (never outside the table, and
/// the allocation is unaffected).
///
/// Host checks (status, nothing enqueued): the reservation is live (not finished, its pool
/// not cleared or restored since: `KVP_STATUS_INVALID_STATE`), the pool not faulted, the
/// table's rows hold `max(lens) + steps` entries (`KVP_STATUS_BUFFER_TOO_SMALL`), NULLs and
/// alignment, the stream (`KVP_STATUS_WRONG_STREAM`). `out`, `table.data` and `rows` must stay
/// alive (at the same addresses) for every replay of a graph holding the step.
///
/// # Safety
/// `reservation` a live reservation or NULL; device buffers of the pool's device as
/// described; `stream` a live stream of the pool's device's primary context, or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_decode_reservation_step_async(
    reservation: *mut kvp_decode_reservation,
    out: *mut c_void,
    table: *const kvp_req_table,
    rows: *const i64,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_reservation(reservation, |object| {
        let Inner::Device(Some(res)) = &object.inner else {
            return fail(
                kvp_status::WrongBackend,
                "this is a host pool's reservation: use kvp_decode_reservation_step",
            );
        };
        let table = if table.is_null() {
            None
        } else {
            Some(tri!(table_of(table)))
        };
        with_pool_of(&object.pool, |pool| {
            let PoolObject::Device(pool) = pool else {
                return fail(
                    kvp_status::WrongBackend,
                    "the reservation's pool is a host pool",
                );
            };
            tri!(check_device_ptr(out, 0, index_align(pool), "out"));
            // (The kernel writes out[i], then reads rows[i] to place the slot in the table.)
            let batch = res.batch();
            let (table_mem, rows_mem) = match &table {
                Some((t, shape, index)) => {
                    (table_span_of(t, shape, *index), span(rows, batch, "rows"))
                }
                None => (
                    (std::ptr::null(), 0, "table.data"),
                    (std::ptr::null(), 0, "rows"),
                ),
            };
            tri!(disjoint(
                &[
                    index_span(out.cast_const(), batch, index_align(pool), "out"),
                    table_mem
                ],
                &[rows_mem],
            ));
            let table = match table {
                Some((t, shape, index)) => {
                    tri!(check_device_ptr(rows.cast(), res.batch(), 8, "rows"));
                    Some((device_table(&t, shape, index), device_ptr(rows)))
                }
                None => None,
            };
            // SAFETY: forwarded caller contract.
            status_of(unsafe {
                pool.reservation_step(res, device_ptr(out.cast_const()), table, stream_of(stream))
            })
        })
    })
}

/// Checks that `pool` is the reservation's pool.
fn check_pool(object: &ReservationObject, pool: *mut kvp_pool) -> Result<(), kvp_status> {
    if pool.is_null() {
        return Err(fail(kvp_status::NullArgument, "pool is NULL"));
    }
    let own = Arc::as_ptr(&object.pool).cast::<kvp_pool>();
    if !std::ptr::eq(own, pool.cast_const()) {
        return Err(fail(
            kvp_status::InvalidArgument,
            "the reservation was made on a different pool",
        ));
    }
    Ok(())
}

/// Ends a host pool's reservation after `steps_used` steps, which must be the number of
/// steps taken (`KVP_STATUS_INVALID_ARGUMENT` otherwise): the pages no used step touched go
/// back to the *front* of the free list in the order they were taken (never staged; on a
/// paged pool this is what `kvp_pool_free_pages` of them would do, on a token pool a free
/// would append them: putting them back leaves the pool exactly as `steps_used` plain
/// `kvp_pool_alloc_decode` calls would have), and each request's partly used last page is
/// rewound to its last used slot (as `kvp_pool_rewind`). (With `need_sort`, a merge made
/// for a step after `steps_used` stays made.) Available size and `pages_in_use` are exact
/// afterwards; the other counters keep what the reserve counted (`batch_size * steps`
/// tokens in `tokens_allocated`, every page taken in `pages_allocated`), and the pages
/// returned count in `pages_freed` and `slots_freed` (counters only grow). The
/// reservation's holds end (its requests can be freed, rewound and continued again).
/// Refused, nothing changed: the reservation is finished or its pool was cleared or
/// restored since (`KVP_STATUS_INVALID_STATE`), `pool` is not the reservation's pool
/// (`KVP_STATUS_INVALID_ARGUMENT`). Ignores an open free group (the pages are returned at
/// once).
///
/// # Safety
/// `pool`, `reservation` live handles or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_decode_reservation_finish(
    pool: *mut kvp_pool,
    reservation: *mut kvp_decode_reservation,
    steps_used: u32,
) -> kvp_status {
    with_reservation(reservation, |object| {
        tri!(check_pool(object, pool));
        let Inner::Host(res) = &mut object.inner else {
            return fail(
                kvp_status::WrongBackend,
                "this is a device pool's reservation: use kvp_decode_reservation_finish_async",
            );
        };
        with_pool_of(&object.pool, |pool| match pool {
            PoolObject::Host(pool) => status_of(pool.finish_reservation(res, steps_used)),
            PoolObject::Device(_) => fail(
                kvp_status::WrongBackend,
                "the reservation's pool is a device pool",
            ),
        })
    })
}

/// Enqueues the end of a device pool's reservation after `steps_used` steps (the number of
/// steps the engine ran: replays plus uncaptured calls) on `stream`: one kernel (one block)
/// that checks the reservation's device step counter equals `steps_used` — a mismatch
/// faults the pool naming both numbers and returns nothing — and that the device's copy of
/// `lens` (as the reserve read it) gives the used steps the pages the host planned — else
/// it faults the pool (`KVP_STATUS_INVALID_LENGTHS`'s message) and returns nothing —, then
/// returns the unused pages
/// and rewinds partly used pages as `kvp_decode_reservation_finish` does. The host plans
/// the returned page count from `steps_used`, so `kvp_pool_available_size` is exact right
/// after the call, and the holds end (a free of the batch's requests enqueued after the
/// finish is valid). Host checks (status, nothing enqueued): `steps_used <= steps`, the
/// reservation live and of `pool`, the pool not faulted, the stream. A step replayed after
/// the finish writes 0 and faults (see `kvp_decode_reservation_step_async`).
///
/// # Safety
/// `pool`, `reservation` live handles or NULL; `stream` a live stream of the pool's
/// device's primary context, or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_decode_reservation_finish_async(
    pool: *mut kvp_pool,
    reservation: *mut kvp_decode_reservation,
    steps_used: u32,
    stream: *mut CUstream_st,
) -> kvp_status {
    with_reservation(reservation, |object| {
        tri!(check_pool(object, pool));
        let Inner::Device(Some(res)) = &mut object.inner else {
            return fail(
                kvp_status::WrongBackend,
                "this is a host pool's reservation: use kvp_decode_reservation_finish",
            );
        };
        with_pool_of(&object.pool, |pool| match pool {
            // SAFETY: forwarded caller contract.
            PoolObject::Device(pool) => {
                status_of(unsafe { pool.finish_reservation(res, steps_used, stream_of(stream)) })
            }
            PoolObject::Host(_) => fail(
                kvp_status::WrongBackend,
                "the reservation's pool is a host pool",
            ),
        })
    })
}

/// Writes the reservation's step count, batch size and the pages it took. Either backend;
/// any of the out-pointers may be NULL.
///
/// # Safety
/// `reservation` a live reservation or NULL; each out-pointer writable or NULL.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn kvp_decode_reservation_get_info(
    reservation: *const kvp_decode_reservation,
    out_steps: *mut u32,
    out_batch_size: *mut usize,
    out_pages: *mut u64,
) -> kvp_status {
    with_reservation(reservation, |object| {
        let plan = match &object.inner {
            Inner::Host(res) => res.plan(),
            Inner::Device(Some(res)) => res.plan(),
            Inner::Device(None) => return fail(kvp_status::InvalidState, "released"),
        };
        // SAFETY: each non-NULL pointer is writable (caller contract).
        unsafe {
            if let Some(p) = out_steps.as_mut() {
                *p = plan.steps;
            }
            if let Some(p) = out_batch_size.as_mut() {
                *p = plan.batch;
            }
            if let Some(p) = out_pages.as_mut() {
                *p = plan.total_pages;
            }
        }
        kvp_status::Ok
    })
}

/// Releases a reservation (NULL: no-op). After a finish this only frees the handle. An
/// unfinished reservation returns nothing to the pool: its pages stay allocated with their
/// fill points as if every reserved step had run (only the engine knows how many ran; call
/// the finish first to get the unused pages back), and its holds end — on a host pool at
/// once, on a device pool in a small kernel the pool enqueues ahead of its next call (on
/// that call's stream; deferred while that stream is being captured). A device
/// reservation's memory is kept by its pool for later reservations: a graph holding one of
/// its steps must not be replayed afterwards (a replay writes the padding slot and faults
/// the pool: after the finish or the end of the holds, or once a later reservation took
/// the memory). Releases the reservation's reference to its pool.
///
/// # Safety
/// `reservation` NULL or a live reservation, not used concurrently or afterwards.
#[no_mangle]
pub unsafe extern "C" fn kvp_decode_reservation_free(reservation: *mut kvp_decode_reservation) {
    // SAFETY: forwarded caller contract.
    unsafe { release::<ReservationObject, kvp_decode_reservation>(reservation) }
}
