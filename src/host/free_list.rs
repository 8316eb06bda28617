//! The ordered list of free pages, with SGLang's reuse order and staged (unsorted) frees.

use std::collections::VecDeque;

use super::memory;
use crate::pool::error::PoolError;

/// Which end freed pages go to. SGLang's token pool appends (least recently freed is reused
/// first); its paged pool prepends (most recently freed is reused first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReuseOrder {
    /// Frees go to the tail (token pool).
    Fifo,
    /// Frees go to the front, each freed batch keeping its own order (paged pool).
    Lifo,
}

/// Free pages in allocation order, plus pages released under `need_sort` that wait,
/// unsorted, until an allocation runs short and merges them.
#[derive(Clone, Debug)]
pub struct FreeList {
    order: ReuseOrder,
    need_sort: bool,
    pages: VecDeque<u32>,
    staged: Vec<u32>,
}

impl FreeList {
    /// A full list `1..=num_pages` (page 0 is the padding sink). Room for every page is
    /// reserved up front (staged pages too, under `need_sort`), so later calls never allocate.
    pub fn new(num_pages: u32, order: ReuseOrder, need_sort: bool) -> Result<Self, PoolError> {
        let n = num_pages as usize;
        let mut pages = VecDeque::new();
        pages
            .try_reserve_exact(n)
            .map_err(|_| memory::exhausted("free list", n, 4))?;
        let mut staged = Vec::new();
        if need_sort {
            staged
                .try_reserve_exact(n)
                .map_err(|_| memory::exhausted("staged free list", n, 4))?;
        }
        let mut list = Self {
            order,
            need_sort,
            pages,
            staged,
        };
        list.reset(num_pages);
        Ok(list)
    }

    /// A copy, or an out-of-memory error (snapshots).
    pub fn try_clone(&self) -> Result<Self, PoolError> {
        let mut pages = VecDeque::new();
        pages
            .try_reserve_exact(self.pages.len())
            .map_err(|_| memory::exhausted("snapshot of the free list", self.pages.len(), 4))?;
        pages.extend(self.pages.iter().copied());
        Ok(Self {
            order: self.order,
            need_sort: self.need_sort,
            pages,
            staged: memory::copied("snapshot of the staged frees", &self.staged)?,
        })
    }

    /// Back to `1..=num_pages`, nothing staged.
    pub fn reset(&mut self, num_pages: u32) {
        self.pages.clear();
        self.pages.extend(1..=num_pages);
        self.staged.clear();
    }

    /// Pages that can be taken without a merge.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Pages released under `need_sort` and not yet merged.
    pub fn staged_len(&self) -> usize {
        self.staged.len()
    }

    /// Pages released under `need_sort`, in release order.
    pub fn staged(&self) -> &[u32] {
        &self.staged
    }

    /// Takes the next page. The caller has checked `len()` first.
    #[inline]
    pub fn take(&mut self) -> u32 {
        self.pages
            .pop_front()
            .expect("free list underflow: shortage must be checked before taking pages")
    }

    /// Returns `pages` (in the given order) to the pool: staged under `need_sort`,
    /// otherwise at the tail (FIFO) or as one block at the front (LIFO).
    pub fn release(&mut self, pages: &[u32]) {
        if self.need_sort {
            self.staged.extend_from_slice(pages);
            return;
        }
        match self.order {
            ReuseOrder::Fifo => self.pages.extend(pages.iter().copied()),
            ReuseOrder::Lifo => {
                for &page in pages.iter().rev() {
                    self.pages.push_front(page);
                }
            }
        }
    }

    /// Puts `pages`, taken earlier in this order, back at the front of the list, as if they
    /// had never been taken (never staged: a decode reservation returning what it did not
    /// use leaves the list exactly as the decodes it stood for would have).
    pub fn untake(&mut self, pages: &[u32]) {
        for &page in pages.iter().rev() {
            self.pages.push_front(page);
        }
    }

    /// `free = sort(free ++ staged)`; returns whether anything was staged.
    pub fn merge_and_sort(&mut self) -> bool {
        if self.staged.is_empty() {
            return false;
        }
        self.pages.extend(self.staged.drain(..));
        self.pages.make_contiguous().sort_unstable();
        true
    }

    /// Becomes a copy of `saved`, keeping this list's reserved capacity.
    pub fn load(&mut self, saved: &Self) {
        self.pages.clone_from(&saved.pages);
        self.staged.clone_from(&saved.staged);
    }

    /// The free pages in allocation order (without the staged ones).
    pub fn free_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.pages.iter().copied()
    }

    /// The free pages in allocation order, then the staged ones (a census for tests).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.pages.iter().chain(self.staged.iter()).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_all(list: &mut FreeList) -> Vec<u32> {
        (0..list.len()).map(|_| list.take()).collect()
    }

    #[test]
    fn fifo_appends_in_call_order() {
        let mut list = FreeList::new(4, ReuseOrder::Fifo, false).unwrap();
        let taken: Vec<u32> = (0..3).map(|_| list.take()).collect();
        assert_eq!(taken, [1, 2, 3]);
        list.release(&[3, 1]);
        assert_eq!(take_all(&mut list), [4, 3, 1]);
    }

    #[test]
    fn lifo_prepends_each_batch_in_its_order() {
        let mut list = FreeList::new(6, ReuseOrder::Lifo, false).unwrap();
        for _ in 0..4 {
            list.take();
        }
        list.release(&[1, 2]);
        list.release(&[4, 3]);
        assert_eq!(take_all(&mut list), [4, 3, 1, 2, 5, 6]);
    }

    #[test]
    fn staged_pages_count_and_merge_sorted() {
        let mut list = FreeList::new(5, ReuseOrder::Lifo, true).unwrap();
        for _ in 0..4 {
            list.take();
        }
        list.release(&[3, 1]);
        assert_eq!((list.len(), list.staged_len()), (1, 2));
        assert!(list.merge_and_sort());
        assert!(!list.merge_and_sort());
        assert_eq!(take_all(&mut list), [1, 3, 5]);
    }
}
