//! The host storage's part of the pool digest (definition: [`crate::digest`]).

use super::{HostStorage, PageState};
use crate::digest::{free_term, page_state, page_term, staged_term, PoolDigestParts};

impl HostStorage {
    /// The pool digest of this storage's state (`need_sort` and `group_open` from the pool).
    pub fn digest(&self, need_sort: bool, group_open: bool) -> u64 {
        let (free, map) = (&self.state.free, &self.state.map);
        let paged = self.layout.page_size > 1;
        let mut parts = PoolDigestParts {
            page_size: self.layout.page_size,
            num_pages: self.layout.num_pages,
            need_sort,
            group_open,
            faulted: false,
            free_len: free.len() as u64,
            staged_len: free.staged_len() as u64,
            ..PoolDigestParts::default()
        };
        for (k, page) in free.free_pages().enumerate() {
            parts.free_sum = parts.free_sum.wrapping_add(free_term(k as u64, page));
        }
        for &page in free.staged() {
            parts.staged_sum = parts.staged_sum.wrapping_add(staged_term(page));
        }
        for page in 0..=self.layout.num_pages {
            let (state, fill) = match map.get(page) {
                PageState::Reserved => (page_state::RESERVED, 0),
                PageState::Free => (page_state::FREE, 0),
                PageState::Staged => (page_state::STAGED, 0),
                // A hold is a lock, not a state of the slots: held pages digest as allocated.
                PageState::Allocated | PageState::Held if paged => {
                    (page_state::ALLOCATED, map.fill(page))
                }
                PageState::Allocated | PageState::Held => (page_state::ALLOCATED, 0),
                PageState::Pending => (page_state::PENDING, 0),
            };
            parts.page_sum = parts.page_sum.wrapping_add(page_term(page, state, fill));
        }
        parts.finish()
    }
}
