//! Per-page state (one byte a page) and scratch marks: what makes validation O(n) per call.

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
    /// Freed inside an open free group; returns to the pool when the group ends.
    Pending,
}

/// The state of every page, indexed by page id.
#[derive(Clone, Debug)]
pub struct PageMap {
    states: Vec<PageState>,
}

impl PageMap {
    /// Page 0 reserved, pages `1..=num_pages` free.
    pub fn new(num_pages: u32) -> Self {
        let mut map = Self { states: Vec::new() };
        map.reset(num_pages);
        map
    }

    /// Back to all pages free.
    pub fn reset(&mut self, num_pages: u32) {
        self.states.clear();
        self.states.resize(num_pages as usize + 1, PageState::Free);
        self.states[0] = PageState::Reserved;
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
    pub fn new(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
        }
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
        let mut marks = Marks::new(130);
        assert!(marks.insert(129));
        assert!(marks.insert(0));
        assert!(!marks.insert(129));
        marks.remove(129);
        marks.remove(0);
        assert!(marks.is_clear());
    }

    #[test]
    fn page_zero_is_reserved() {
        let map = PageMap::new(3);
        assert_eq!(map.get(0), PageState::Reserved);
        assert_eq!(map.count(PageState::Free), 3);
    }
}
