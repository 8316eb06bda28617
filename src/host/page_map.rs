//! Per-page state (one byte a page), each allocated page's fill point (four bytes a page),
//! and scratch marks: what makes validation O(n) per call.

use super::memory;
use crate::pool::error::PoolError;

/// Where a page is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageState {
    /// Page 0, the padding sink: never allocated, never freed.
    Reserved,
    /// In the free list.
    Free,
    /// Released under `need_sort`, waiting for a merge; counts as available.
    Staged,
    /// Handed out.
    Allocated,
    /// Handed out, and a live decode reservation hands out more of its slots in later
    /// steps: it cannot be freed, rewound or continued until the reservation ends (else a
    /// freed page could go to another request while the steps still hand out its slots).
    Held,
    /// Freed inside an open free group; returns to the pool when the group ends.
    Pending,
}

/// The state of every page, indexed by page id, and the fill point of each allocated page.
///
/// The fill point is how many of a page's slots have been handed out (from its first slot
/// on). A continuation (`last_loc`) must end exactly there, so a stale or foreign `last_loc`
/// cannot make the pool hand out a slot it already handed out; only an explicit rewind
/// moves it back. It is meaningful only while the page is allocated.
#[derive(Clone, Debug)]
pub struct PageMap {
    states: Vec<PageState>,
    fill: Vec<u32>,
}

impl PageMap {
    /// Page 0 reserved, pages `1..=num_pages` free.
    pub fn new(num_pages: u32) -> Result<Self, PoolError> {
        let len = num_pages as usize + 1;
        let mut map = Self {
            states: memory::filled("page map", len, PageState::Free)?,
            fill: memory::zeroed("page fill points", len)?,
        };
        map.reset(num_pages);
        Ok(map)
    }

    /// Back to all pages free.
    pub fn reset(&mut self, num_pages: u32) {
        self.states.clear();
        self.states.resize(num_pages as usize + 1, PageState::Free);
        self.states[0] = PageState::Reserved;
    }

    /// A copy, or an out-of-memory error (snapshots).
    pub fn try_clone(&self) -> Result<Self, PoolError> {
        Ok(Self {
            states: memory::copied("snapshot of the page map", &self.states)?,
            fill: memory::copied("snapshot of the page fill points", &self.fill)?,
        })
    }

    /// Becomes a copy of `saved` (same pool), without allocating. Held pages come back
    /// plainly allocated: a restore ends every reservation.
    pub fn load(&mut self, saved: &Self) {
        self.states.copy_from_slice(&saved.states);
        self.fill.copy_from_slice(&saved.fill);
        for state in &mut self.states {
            if *state == PageState::Held {
                *state = PageState::Allocated;
            }
        }
    }

    /// Slots of allocated `page` handed out so far (its fill point).
    #[inline]
    pub fn fill(&self, page: u32) -> u32 {
        self.fill[page as usize]
    }

    /// Sets the fill point of allocated `page`.
    #[inline]
    pub fn set_fill(&mut self, page: u32, fill: u32) {
        self.fill[page as usize] = fill;
    }

    /// State of `page`, which the caller has range-checked.
    #[inline]
    pub fn get(&self, page: u32) -> PageState {
        self.states[page as usize]
    }

    /// Moves `page` to `state`.
    #[inline]
    pub fn set(&mut self, page: u32, state: PageState) {
        debug_assert_ne!(self.states[page as usize], PageState::Reserved);
        self.states[page as usize] = state;
    }

    /// Number of pages in `state`.
    #[cfg(test)]
    pub fn count(&self, state: PageState) -> usize {
        self.states.iter().filter(|&&s| s == state).count()
    }
}

/// A bit per element, set while one call is validated and cleared before it returns, so
/// duplicate detection needs neither sorting nor a per-call allocation.
#[derive(Clone, Debug, Default)]
pub struct Marks {
    words: Vec<u64>,
}

impl Marks {
    /// Room for elements `0..len`.
    pub fn new(len: usize) -> Result<Self, PoolError> {
        Ok(Self {
            words: memory::zeroed("scratch marks", len.div_ceil(64))?,
        })
    }

    /// Sets the bit of `i`; returns `false` if it was already set.
    #[inline]
    pub fn insert(&mut self, i: u64) -> bool {
        let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        let fresh = self.words[word] & bit == 0;
        self.words[word] |= bit;
        fresh
    }

    /// Clears the bit of `i`.
    #[inline]
    pub fn remove(&mut self, i: u64) {
        self.words[(i / 64) as usize] &= !(1u64 << (i % 64));
    }

    /// Whether no bit is set (checked by tests after every call).
    pub fn is_clear(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_detect_duplicates_and_clear() {
        let mut marks = Marks::new(130).unwrap();
        assert!(marks.insert(129));
        assert!(marks.insert(0));
        assert!(!marks.insert(129));
        marks.remove(129);
        marks.remove(0);
        assert!(marks.is_clear());
    }

    #[test]
    fn page_zero_is_reserved() {
        let map = PageMap::new(3).unwrap();
        assert_eq!(map.get(0), PageState::Reserved);
        assert_eq!(map.count(PageState::Free), 3);
    }
}
