//! The pool as the engine uses it, whichever backend holds it.
//!
//! The engine is written once against [`KvPool`]: the calls of the serving loop with the
//! demo's `i64` indices in host memory. `kvpool::Pool` (the host backend, the default)
//! implements it by forwarding each call unchanged; `super::device::DeviceKv` enqueues the
//! same calls on a `kvpool::cuda::DevicePool` and checks each against a host pool.

use kvpool::{Pool, PoolError, PoolInfo, PoolStats};

/// The pool operations the engine and the report use (see `kvpool::Pool` for each).
pub trait KvPool {
    /// Static facts about the pool.
    fn info(&self) -> PoolInfo;
    /// Usable token slots.
    fn size(&self) -> u64;
    /// Tokens per page.
    fn page_size(&self) -> u32;
    /// Free token slots (exact whenever the engine reads them).
    fn available_size(&self) -> u64;
    /// The counters.
    fn stats(&self) -> PoolStats;
    /// `n` slots into `out[..n]`.
    fn alloc(&mut self, n: usize, out: &mut [i64]) -> Result<(), PoolError>;
    /// A prefill batch's slots into `out[..extend_num_tokens]`.
    fn alloc_extend(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[i64],
        extend_num_tokens: u64,
        out: &mut [i64],
    ) -> Result<(), PoolError>;
    /// One slot per decoding request into `out[..seq_lens.len()]`.
    fn alloc_decode(
        &mut self,
        seq_lens: &[i64],
        last_loc: &[i64],
        out: &mut [i64],
    ) -> Result<(), PoolError>;
    /// Frees slots by index.
    fn free(&mut self, indices: &[i64]) -> Result<(), PoolError>;
    /// Frees the pages of `row[start_pos .. start_pos + len]`.
    fn free_segment(&mut self, row: &[i64], start_pos: usize, len: usize) -> Result<(), PoolError>;
    /// Opens a free group.
    fn free_group_begin(&mut self) -> Result<(), PoolError>;
    /// Closes the free group, returning its pages.
    fn free_group_end(&mut self) -> Result<(), PoolError>;
    /// Called at the end of every step, before the engine checks its books: a backend that
    /// works asynchronously settles and checks itself here. The host pool has nothing to do.
    fn end_step(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// After the run: every page is free (the free pages are exactly `1..=num_pages`).
    fn check_all_free(&mut self) -> Result<(), String>;
    /// Which backend ran, for the report.
    fn backend(&self) -> String;
    /// What a backend checked against the host backend has verified so far (`None` for
    /// the host backend itself).
    fn lockstep(&self) -> Option<Lockstep> {
        None
    }
}

/// What a backend shadowed by a host pool has checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lockstep {
    /// Calls that allocated or freed, each compared with the host backend's.
    pub calls: u64,
    /// Slot indices handed out, each equal to the host backend's.
    pub indices: u64,
    /// Steps after which the counts, the stats and the fault state were checked.
    pub steps: u64,
}

/// The host backend: each call goes straight to `kvpool::Pool`.
impl KvPool for Pool {
    fn info(&self) -> PoolInfo {
        Pool::info(self)
    }

    fn size(&self) -> u64 {
        Pool::size(self)
    }

    fn page_size(&self) -> u32 {
        Pool::page_size(self)
    }

    fn available_size(&self) -> u64 {
        Pool::available_size(self)
    }

    fn stats(&self) -> PoolStats {
        Pool::stats(self)
    }

    fn alloc(&mut self, n: usize, out: &mut [i64]) -> Result<(), PoolError> {
        Pool::alloc(self, n, out)
    }

    fn alloc_extend(
        &mut self,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: &[i64],
        extend_num_tokens: u64,
        out: &mut [i64],
    ) -> Result<(), PoolError> {
        Pool::alloc_extend(
            self,
            prefix_lens,
            seq_lens,
            last_loc,
            extend_num_tokens,
            out,
        )
    }

    fn alloc_decode(
        &mut self,
        seq_lens: &[i64],
        last_loc: &[i64],
        out: &mut [i64],
    ) -> Result<(), PoolError> {
        Pool::alloc_decode(self, seq_lens, last_loc, out)
    }

    fn free(&mut self, indices: &[i64]) -> Result<(), PoolError> {
        Pool::free(self, indices)
    }

    fn free_segment(&mut self, row: &[i64], start_pos: usize, len: usize) -> Result<(), PoolError> {
        Pool::free_segment(self, row, start_pos, len)
    }

    fn free_group_begin(&mut self) -> Result<(), PoolError> {
        Pool::free_group_begin(self)
    }

    fn free_group_end(&mut self) -> Result<(), PoolError> {
        Pool::free_group_end(self)
    }

    fn check_all_free(&mut self) -> Result<(), String> {
        all_free(&self.free_page_census(), Pool::num_pages(self))
    }

    fn backend(&self) -> String {
        "host (kvpool::Pool)".to_string()
    }
}

/// Checks that a free-page census holds exactly the pages `1..=num_pages`, in any order.
pub fn all_free(census: &[u32], num_pages: u32) -> Result<(), String> {
    let mut sorted = census.to_vec();
    sorted.sort_unstable();
    if sorted.iter().copied().eq(1..=num_pages) {
        Ok(())
    } else {
        Err(format!(
            "the free pages are not exactly 1..={num_pages} ({} listed)",
            census.len()
        ))
    }
}
