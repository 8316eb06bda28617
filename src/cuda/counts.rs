//! What the host knows about a device pool's free list without asking the device.
//!
//! Every count is host-known except one: a paged pool's free by token index frees as many
//! pages as there are distinct pages among the indices, which only the kernel finds out.
//! Until the stream passes such a free, its pages are not counted (the counts are a lower
//! bound); the kernels of that and every later call publish the device's counts in mapped
//! host memory, and the host rebuilds exact counts from the newest of them plus the calls
//! it enqueued since — no synchronization anywhere.

use std::collections::VecDeque;

/// Pages in each place of the free list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub free: u64,
    pub staged: u64,
    pub group_idx: u64,
    pub group_ord: u64,
}

/// Where a free sends its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    Free,
    Staged,
    GroupIdx,
    GroupOrd,
}

/// One enqueued call, as far as the counts are concerned.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// Pages taken from the free list.
    Take(u64),
    /// Pages released to `dest`; `None` when only the device knows how many.
    Release { dest: Dest, pages: Option<u64> },
    /// The free group's pages go to `dest`.
    GroupEnd { dest: Dest },
    /// Staged pages join the free list.
    Merge,
    /// The counts become these (clear, restore); `exact` false for a snapshot taken while a
    /// count was unknown.
    Set { counts: Counts, exact: bool },
    /// Nothing changes (a backup).
    Keep,
    /// Nothing changes and the kernel leaves the free list's cursors alone (a rewind): the
    /// host does not flip the cursor parity after it.
    InPlace,
}

impl Step {
    /// Whether the kernel writes the other cursor (then the next call must read that one).
    pub(crate) fn moves_cursor(&self) -> bool {
        !matches!(self, Step::InPlace)
    }
}

impl Step {
    pub(crate) fn is_unknown(&self) -> bool {
        matches!(
            self,
            Step::Release { pages: None, .. } | Step::Set { exact: false, .. }
        )
    }

    fn apply(&self, c: &mut Counts) {
        match *self {
            Step::Take(pages) => c.free -= pages,
            Step::Release { dest, pages } => *slot(c, dest) += pages.unwrap_or(0),
            Step::GroupEnd { dest } => {
                let pages = c.group_idx + c.group_ord;
                c.group_idx = 0;
                c.group_ord = 0;
                *slot(c, dest) += pages;
            }
            Step::Merge => {
                c.free += c.staged;
                c.staged = 0;
            }
            Step::Set { counts, .. } => *c = counts,
            Step::Keep | Step::InPlace => {}
        }
    }
}

fn slot(c: &mut Counts, dest: Dest) -> &mut u64 {
    match dest {
        Dest::Free => &mut c.free,
        Dest::Staged => &mut c.staged,
        Dest::GroupIdx => &mut c.group_idx,
        Dest::GroupOrd => &mut c.group_ord,
    }
}

/// The number (counted from 1, never wrapping) of the call numbered `seq` on the device,
/// given that the latest call, `calls_now`, is numbered `seq_now`: the most recent call with
/// that number. Device call numbers run 1 ..= 2^32 - 1 and wrap to 1 (0 names no call), so
/// the answer is right for a call fewer than 2^32 - 1 calls back.
pub(crate) fn call_of(seq: u32, seq_now: u32, calls_now: u64) -> u64 {
    const PERIOD: u64 = u32::MAX as u64; // numbers per turn: 1 ..= 2^32 - 1
    let back = (u64::from(seq_now) + PERIOD - u64::from(seq)) % PERIOD;
    calls_now.saturating_sub(back)
}

/// `a` is `b` or later in the wrapping sequence of calls.
pub(crate) fn seq_at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// Lower bounds of the counts (exact while [`Accounting::is_exact`]), and the calls since
/// the oldest unknown count.
#[derive(Debug, Default)]
pub(crate) struct Accounting {
    counts: Counts,
    /// Calls from the first one with an unknown count on; empty when exact.
    log: VecDeque<(u32, Step)>,
}

impl Accounting {
    /// Exact counts `counts`.
    #[cfg(test)]
    pub fn new(counts: Counts) -> Self {
        Self {
            counts,
            log: VecDeque::new(),
        }
    }

    /// The counts (lower bounds unless exact).
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Whether every count is known.
    pub fn is_exact(&self) -> bool {
        self.log.is_empty()
    }

    /// Whether call `seq` doing `step` must publish its counts (the host is, or will be,
    /// waiting for them).
    pub fn wants_mirror(&self, step: &Step) -> bool {
        !self.is_exact() || step.is_unknown()
    }

    /// Accounts for call `seq`.
    pub fn record(&mut self, seq: u32, step: Step) {
        step.apply(&mut self.counts);
        if matches!(step, Step::Set { exact: true, .. }) {
            self.log.clear();
        } else if !self.log.is_empty() || step.is_unknown() {
            self.log.push_back((seq, step));
        }
    }

    /// Folds in the device's counts as of call `seq` (from the mapped record; `now`: the
    /// latest call's number). Returns the free or staged pages the exact counts add to the
    /// lower bounds: pages returned to the pool now (pages still in an open free group are
    /// counted when it ends).
    pub fn catch_up(&mut self, seq: u32, now: u32, device: Counts) -> u64 {
        let Some(&(first, _)) = self.log.front() else {
            return 0;
        };
        // Published before the oldest unknown call: says nothing new. (A record from over
        // 2^31 calls back would read as later than `first` in the wrapping order; it would
        // also read as later than `now`, which no record can be. The pool clears the record
        // when the log starts, so none is that old: see `DevicePool::next_call`.)
        if !seq_at_or_after(seq, first) || !seq_at_or_after(now, seq) {
            return 0;
        }
        while self
            .log
            .front()
            .is_some_and(|&(s, _)| seq_at_or_after(seq, s))
        {
            self.log.pop_front();
        }
        let before = self.counts.free + self.counts.staged;
        let mut counts = device;
        for (_, step) in &self.log {
            step.apply(&mut counts);
        }
        self.counts = counts;
        if !self.log.iter().any(|(_, step)| step.is_unknown()) {
            self.log.clear();
        }
        (self.counts.free + self.counts.staged).saturating_sub(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(free: u64, staged: u64) -> Counts {
        Counts {
            free,
            staged,
            ..Counts::default()
        }
    }

    #[test]
    fn known_steps_stay_exact() {
        let mut a = Accounting::new(counts(10, 0));
        a.record(1, Step::Take(4));
        a.record(
            2,
            Step::Release {
                dest: Dest::Staged,
                pages: Some(3),
            },
        );
        a.record(3, Step::Merge);
        assert!(a.is_exact());
        assert_eq!(a.counts(), counts(9, 0));
    }

    #[test]
    fn an_unknown_free_is_a_lower_bound_until_the_device_reports() {
        let mut a = Accounting::new(counts(10, 0));
        a.record(1, Step::Take(6));
        a.record(
            2,
            Step::Release {
                dest: Dest::Free,
                pages: None,
            },
        );
        assert!(!a.is_exact());
        assert_eq!(a.counts().free, 4);
        a.record(3, Step::Take(1));
        // A record from before the unknown free teaches nothing.
        assert_eq!(a.catch_up(1, 3, counts(4, 0)), 0);
        assert!(!a.is_exact());
        // The device after call 2 had 7 free (the free released 3 pages); call 3 took one.
        assert_eq!(a.catch_up(2, 3, counts(7, 0)), 3);
        assert!(a.is_exact());
        assert_eq!(a.counts().free, 6);
    }

    #[test]
    fn a_later_unknown_keeps_the_bound() {
        let mut a = Accounting::new(counts(10, 0));
        a.record(
            1,
            Step::Release {
                dest: Dest::Staged,
                pages: None,
            },
        );
        a.record(
            2,
            Step::Release {
                dest: Dest::Staged,
                pages: None,
            },
        );
        a.record(3, Step::Merge);
        a.catch_up(1, 3, counts(10, 2));
        assert!(!a.is_exact());
        assert_eq!(a.counts(), counts(12, 0));
        a.catch_up(3, 3, counts(15, 0));
        assert!(a.is_exact());
        assert_eq!(a.counts(), counts(15, 0));
    }

    #[test]
    fn pages_learned_inside_an_open_group_are_not_counted_as_returned() {
        let mut a = Accounting::new(counts(10, 0));
        a.record(
            1,
            Step::Release {
                dest: Dest::GroupIdx,
                pages: None,
            },
        );
        let device = Counts {
            group_idx: 3,
            ..counts(10, 0)
        };
        assert_eq!(a.catch_up(1, 1, device), 0, "still in the group");
        assert!(a.is_exact());
        a.record(2, Step::GroupEnd { dest: Dest::Free });
        assert_eq!(a.counts(), counts(13, 0));
    }

    #[test]
    fn sequence_numbers_wrap() {
        assert!(seq_at_or_after(2, u32::MAX));
        assert!(!seq_at_or_after(u32::MAX, 2));
        let mut a = Accounting::new(counts(4, 0));
        a.record(
            u32::MAX,
            Step::Release {
                dest: Dest::Free,
                pages: None,
            },
        );
        a.record(1, Step::Take(1));
        assert_eq!(a.catch_up(u32::MAX, 1, counts(6, 0)), 2);
        assert_eq!(a.counts().free, 5);
    }

    #[test]
    fn a_record_later_than_the_latest_call_teaches_nothing() {
        // The log starts at call 1000; a record numbered 1000 + 2^31 + 5 reads as later than
        // 1000 in the wrapping order, but it is later than the latest call (1002) too: a
        // record from over 2^31 calls back, not a new one.
        let mut a = Accounting::new(counts(10, 0));
        a.record(
            1000,
            Step::Release {
                dest: Dest::Free,
                pages: None,
            },
        );
        a.record(1002, Step::Take(3));
        let stale = 1000u32.wrapping_add(1 << 31).wrapping_add(5);
        assert_eq!(a.catch_up(stale, 1002, counts(5000, 0)), 0);
        assert!(!a.is_exact());
        assert_eq!(a.counts().free, 7);
        assert_eq!(a.catch_up(1001, 1002, counts(12, 0)), 2);
        assert!(a.is_exact());
        assert_eq!(a.counts().free, 9);
    }

    #[test]
    fn call_numbers_map_to_calls_across_the_wrap() {
        // Numbers run 1 ..= u32::MAX, then 1 again (0 is skipped).
        assert_eq!(call_of(7, 7, 100), 100);
        assert_eq!(call_of(5, 7, 100), 98);
        assert_eq!(call_of(u32::MAX, 1, 100), 99);
        assert_eq!(call_of(u32::MAX - 1, 2, 100), 97);
        // A number just after the latest is from the previous turn, 2^32 - 2 calls back.
        let calls = 10u64 << 32;
        assert_eq!(call_of(8, 7, calls), calls - (u64::from(u32::MAX) - 1));
        // Before the first call: no call is older than the first.
        assert_eq!(call_of(9, 2, 2), 0);
    }
}
