//! State digests: a cheap 64-bit hash of everything that decides a pool's or a scheduler's
//! next answers, so tensor-parallel ranks (each with its own pool and scheduler, driven by
//! the same inputs) can check that they still agree by comparing one integer per step.
//!
//! The definition is fixed (version 1) and identical for the host and the CUDA backend:
//! the same operation sequence gives the same digest on both, so a host rank, a device rank
//! and a host model can be compared. It is documented here and at `kvp_pool_digest` in
//! `include/kvpool.h` so other implementations can reproduce it; `kernels/digest.cuh`
//! computes the device pool's digest with the same constants.
//!
//! ## The mix
//!
//! `mix(x)` is splitmix64's output function applied to `x + 0x9E3779B97F4A7C15`:
//!
//! ```text
//! z = x + 0x9E3779B97F4A7C15
//! z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//! z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//! mix(x) = z ^ (z >> 31)                       (all arithmetic modulo 2^64)
//! ```
//!
//! `chain(h, x1, x2, ...)` is `h = mix(h ^ x1); h = mix(h ^ x2); ...` (order-dependent).
//!
//! ## Pool digest (version 1)
//!
//! Three wrapping (mod 2^64) sums, each term mixed with its position or page, so they can
//! be computed in parallel and in any order:
//!
//! - free list, **in order**: `F = Σ_k mix(mix(DOMAIN_FREE + k) ^ page_k)` over the free
//!   list from its head (`k = 0` is the next page handed out);
//! - staged pages (`need_sort` frees not yet merged), **as a set** (the backends keep them in
//!   different physical orders; the order never matters: a merge sorts them):
//!   `S = Σ mix(DOMAIN_STAGED ^ page)`;
//! - page map, every page `p` in `0..=num_pages`:
//!   `P = Σ_p mix(mix(DOMAIN_PAGE + p) ^ (state_p | fill_p << 8))` with `state_p` 0 reserved
//!   (page 0), 1 free, 2 staged, 3 allocated, 4 freed in an open free group, and `fill_p`
//!   the page's fill point (slots handed out) when the page is allocated in a paged pool
//!   (`page_size > 1`), else 0. Only the fill count is hashed (a device fill word's tag is
//!   not).
//!
//! Then `digest = chain(DOMAIN_POOL, 1, page_size, num_pages, need_sort, group_open,
//! faulted, free_len, staged_len, F, S, P)` with booleans as 0/1 (`faulted`: a device pool's
//! sticky fault; always 0 on the host).
//!
//! ## Scheduler digest (version 1)
//!
//! `request(r) = chain(DOMAIN_REQUEST, id, arrival, phase, kv_len, fill_len, input_len,
//! prefix_len, prefix_evictable, max_new_tokens, output_len, ignore_eos, priority,
//! retractions, path_len, path[0], ...)` (phase 0 waiting, 1 chunking, 2 running; arrival is
//! the submission number; priority as two's complement). The digest is
//! `chain(DOMAIN_SCHEDULER, 1, page_size, capacity, n_waiting, request(w) for each waiting
//! request in queue order, n_chunking, request(c) ..., n_running, request(r) ... in
//! admission order, bits of new_token_ratio (IEEE-754 double), batch_is_full,
//! next_arrival, steps, prefill_steps, decode_steps, admitted, chunks, retractions,
//! preemptions, aborts, unfittable, finished)`.

/// The digest definition's version (the first value chained after the domain).
pub const DIGEST_VERSION: u64 = 1;
/// Seed of the pool digest's final chain (`"KVPPOOL"`, version byte 1).
pub const DOMAIN_POOL: u64 = 0x4b56_5050_4f4f_4c01;
/// Free-list terms (`"FREELIST"`).
pub const DOMAIN_FREE: u64 = 0x4652_4545_4c49_5354;
/// Staged-page terms (`"STAGED\0\0"`).
pub const DOMAIN_STAGED: u64 = 0x5354_4147_4544_0000;
/// Page-map terms (`"PAGEMAP\0"`).
pub const DOMAIN_PAGE: u64 = 0x5041_4745_4d41_5000;
/// Seed of the scheduler digest (`"KVPSCHED"`).
pub const DOMAIN_SCHEDULER: u64 = 0x4b56_5053_4348_4544;
/// Seed of each request's hash in the scheduler digest (`"REQUEST\0"`).
pub const DOMAIN_REQUEST: u64 = 0x5245_5155_4553_5400;

/// Page states as the digest numbers them.
pub mod page_state {
    /// Page 0, the padding page.
    pub const RESERVED: u64 = 0;
    /// In the free list.
    pub const FREE: u64 = 1;
    /// Staged under `need_sort`.
    pub const STAGED: u64 = 2;
    /// Handed out.
    pub const ALLOCATED: u64 = 3;
    /// Freed inside an open free group.
    pub const PENDING: u64 = 4;
}

/// splitmix64's output function of `x + 0x9E3779B97F4A7C15` (see the module docs).
#[inline]
pub const fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// An order-dependent chain: `h = mix(h ^ x)` per value.
#[derive(Clone, Copy, Debug)]
pub struct Chain(pub u64);

impl Chain {
    /// A chain seeded with `domain`.
    pub const fn new(domain: u64) -> Self {
        Self(domain)
    }

    /// Folds `x` in.
    #[inline]
    pub fn push(&mut self, x: u64) -> &mut Self {
        self.0 = mix(self.0 ^ x);
        self
    }

    /// Folds every value of `xs` in, in order.
    pub fn extend(&mut self, xs: impl IntoIterator<Item = u64>) -> &mut Self {
        for x in xs {
            self.push(x);
        }
        self
    }

    /// The value so far.
    pub fn value(&self) -> u64 {
        self.0
    }
}

/// The free-list term of `page` at position `k` from the head.
#[inline]
pub fn free_term(k: u64, page: u32) -> u64 {
    mix(mix(DOMAIN_FREE.wrapping_add(k)) ^ u64::from(page))
}

/// The term of a staged `page`.
#[inline]
pub fn staged_term(page: u32) -> u64 {
    mix(DOMAIN_STAGED ^ u64::from(page))
}

/// The page-map term of `page` in digest `state` (see [`page_state`]) with `fill` (0 unless
/// the page is allocated in a paged pool).
#[inline]
pub fn page_term(page: u32, state: u64, fill: u32) -> u64 {
    mix(mix(DOMAIN_PAGE.wrapping_add(u64::from(page))) ^ (state | u64::from(fill) << 8))
}

/// What the pool digest's final chain folds in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolDigestParts {
    /// Tokens per page.
    pub page_size: u32,
    /// Pages (page 0 excluded).
    pub num_pages: u32,
    /// Staged frees.
    pub need_sort: bool,
    /// A free group is open.
    pub group_open: bool,
    /// A device pool's sticky fault is set.
    pub faulted: bool,
    /// Pages in the free list.
    pub free_len: u64,
    /// Pages staged.
    pub staged_len: u64,
    /// Sum of the free-list terms.
    pub free_sum: u64,
    /// Sum of the staged terms.
    pub staged_sum: u64,
    /// Sum of the page-map terms.
    pub page_sum: u64,
}

impl PoolDigestParts {
    /// The digest.
    pub fn finish(&self) -> u64 {
        Chain::new(DOMAIN_POOL)
            .extend([
                DIGEST_VERSION,
                u64::from(self.page_size),
                u64::from(self.num_pages),
                u64::from(self.need_sort),
                u64::from(self.group_open),
                u64::from(self.faulted),
                self.free_len,
                self.staged_len,
                self.free_sum,
                self.staged_sum,
                self.page_sum,
            ])
            .value()
    }
}

/// Computes a pool digest from its parts in the definition's terms (a reference
/// implementation for other backends and tests): `free` from the head, `staged` in any
/// order, `pages[p] = (state, fill)` for `p` in `0..=num_pages`.
pub fn pool_digest(
    page_size: u32,
    need_sort: bool,
    group_open: bool,
    faulted: bool,
    free: &[u32],
    staged: &[u32],
    pages: &[(u64, u32)],
) -> u64 {
    let mut parts = PoolDigestParts {
        page_size,
        num_pages: pages.len().saturating_sub(1) as u32,
        need_sort,
        group_open,
        faulted,
        free_len: free.len() as u64,
        staged_len: staged.len() as u64,
        ..PoolDigestParts::default()
    };
    for (k, &page) in free.iter().enumerate() {
        parts.free_sum = parts.free_sum.wrapping_add(free_term(k as u64, page));
    }
    for &page in staged {
        parts.staged_sum = parts.staged_sum.wrapping_add(staged_term(page));
    }
    for (p, &(state, fill)) in pages.iter().enumerate() {
        let fill = if state == page_state::ALLOCATED && page_size > 1 {
            fill
        } else {
            0
        };
        parts.page_sum = parts
            .page_sum
            .wrapping_add(page_term(p as u32, state, fill));
    }
    parts.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_splitmix64() {
        // splitmix64 seeded with 0: the first outputs are mix(0), mix(golden), ...
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn staged_pages_are_a_set_and_the_free_list_a_sequence() {
        let pages = [(0, 0), (3, 4), (2, 0), (2, 0), (1, 0)];
        let a = pool_digest(16, true, false, false, &[4], &[2, 3], &pages);
        let b = pool_digest(16, true, false, false, &[4], &[3, 2], &pages);
        assert_eq!(a, b);
        let pages = [(0, 0), (3, 4), (1, 0), (1, 0), (1, 0)];
        let c = pool_digest(16, false, false, false, &[2, 3, 4], &[], &pages);
        let d = pool_digest(16, false, false, false, &[3, 2, 4], &[], &pages);
        assert_ne!(c, d);
    }
}
