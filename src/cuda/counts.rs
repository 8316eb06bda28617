//! What the host knows about a device pool's free list without asking the device.
//!
//! Every count is host-known except one: a paged pool's free by token index frees as many
//! pages as there are distinct pages among the indices, which only the kernel finds out.
//! Until the stream passes such a free, its pages are not counted (the counts are a lower
//! bound); the kernels of that and every later call publish the device's counts in mapped
//! host memory, and the host rebuilds exact counts from the newest of them plus the calls
//! it enqueued since — no synchronization anywhere.
//!
//! The same bookkeeping gives the ring position of the free list's head whenever the counts
//! are exact (`Accounting::head_hint`): the one-block extend kernels load the ring's first
//! pages at that position with their first round trip, beside the cursor, instead of after
//! it (`Call::head_hint`; the lockstep test checks the hint against the device's cursor).

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
    /// The free list, before its head (a paged pool's frees; ended reservations' pages).
    FreeFront,
    /// The free list, after its last page (a token pool's frees).
    FreeTail,
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
    /// count was unknown; `tail`: the ring position after the free list's last page, if
    /// known (see [`Accounting::tail`]).
    Set {
        counts: Counts,
        exact: bool,
        tail: Option<u64>,
    },
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
        Dest::FreeFront | Dest::FreeTail => &mut c.free,
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

/// Lower bounds of the counts (exact while [`Accounting::is_exact`]), the calls since the
/// oldest unknown count, and where the free list ends in the ring.
#[derive(Debug, Default)]
pub(crate) struct Accounting {
    counts: Counts,
    /// Calls from the first one with an unknown count on; empty when exact.
    log: VecDeque<(u32, Step)>,
    /// The ring's length (the pool's pages; 0: no ring is followed).
    ring: u64,
    /// The ring position after the free list's last page, `(head + free) % ring`, when
    /// known. Taking pages and releasing them before the head move the head and the count
    /// together and leave it; only a release after the last page (a token pool's free), a
    /// merge (the ring rebuilt from position 0) and a clear or restore move it. It is lost
    /// when one of those moves it by a count the host does not know.
    tail: Option<u64>,
}

impl Accounting {
    /// Exact counts `counts` of a ring of `ring` pages whose free list ends at `tail`.
    #[cfg(test)]
    pub fn new(counts: Counts, ring: u64, tail: Option<u64>) -> Self {
        Self {
            counts,
            log: VecDeque::new(),
            ring,
            tail,
        }
    }

    /// Follows a ring of `ring` pages (the pool's first call, a clear, gives its end).
    pub fn for_ring(ring: u64) -> Self {
        Self {
            ring,
            ..Self::default()
        }
    }

    /// Where the free list ends in the ring, if known (for a snapshot: see [`Step::Set`]).
    pub fn tail(&self) -> Option<u64> {
        self.tail
    }

    /// The ring position of the free list's head, when the host knows it: the counts are
    /// exact and the tail known. What the device's cursor holds once the calls enqueued so
    /// far have run, unless one of them failed (a fault, which makes every later call
    /// change nothing until a clear or restore sets a known tail again).
    pub fn head_hint(&self) -> Option<u32> {
        let tail = self.tail.filter(|_| self.is_exact() && self.ring > 0)?;
        let free = self.counts.free;
        // free <= ring when the counts are the device's; anything else is not a position.
        (free <= self.ring).then(|| ((tail + self.ring - free) % self.ring) as u32)
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
        self.tail = self.tail_after(&step);
        step.apply(&mut self.counts);
        if matches!(step, Step::Set { exact: true, .. }) {
            self.log.clear();
        } else if !self.log.is_empty() || step.is_unknown() {
            self.log.push_back((seq, step));
        }
    }

    /// The tail after `step`, from the counts before it.
    fn tail_after(&self, step: &Step) -> Option<u64> {
        let exact = self.is_exact();
        let c = self.counts;
        let moved = |by: Option<u64>| Some((self.tail? + by?) % self.ring.max(1));
        match *step {
            Step::Release {
                dest: Dest::FreeTail,
                pages,
            } => moved(pages),
            Step::GroupEnd {
                dest: Dest::FreeTail,
            } => moved(exact.then_some(c.group_idx + c.group_ord)),
            // The merge kernel rebuilds the ring from position 0 when pages are staged, and
            // changes nothing otherwise.
            Step::Merge if !exact => None,
            Step::Merge if c.staged > 0 => Some((c.free + c.staged) % self.ring.max(1)),
            Step::Set { tail, .. } => tail,
            _ => self.tail,
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
        let mut a = Accounting::new(counts(10, 0), 0, None);
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
        let mut a = Accounting::new(counts(10, 0), 0, None);
        a.record(1, Step::Take(6));
        a.record(
            2,
            Step::Release {
                dest: Dest::FreeFront,
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
        let mut a = Accounting::new(counts(10, 0), 0, None);
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
        let mut a = Accounting::new(counts(10, 0), 0, None);
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
        a.record(
            2,
            Step::GroupEnd {
                dest: Dest::FreeFront,
            },
        );
        assert_eq!(a.counts(), counts(13, 0));
    }

    #[test]
    fn sequence_numbers_wrap() {
        assert!(seq_at_or_after(2, u32::MAX));
        assert!(!seq_at_or_after(u32::MAX, 2));
        let mut a = Accounting::new(counts(4, 0), 0, None);
        a.record(
            u32::MAX,
            Step::Release {
                dest: Dest::FreeFront,
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
        let mut a = Accounting::new(counts(10, 0), 0, None);
        a.record(
            1000,
            Step::Release {
                dest: Dest::FreeFront,
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

    /// The device's cursor as the kernels move it (pool.cu: `taken_cursor`, `advance`,
    /// `merge`, `reset`; reservation.cuh's finish releases before the head).
    #[derive(Clone, Copy, Debug)]
    struct DeviceCursor {
        head: u64,
        free: u64,
        staged: u64,
        group: u64,
    }

    impl DeviceCursor {
        fn counts(&self) -> Counts {
            Counts {
                free: self.free,
                staged: self.staged,
                group_ord: self.group,
                ..Counts::default()
            }
        }
    }

    /// Random calls on a ring of `n` pages, each applied to the device's cursor and
    /// recorded by the host (unknown counts for some releases before the head, learned
    /// later from a "published" record): wherever the host gives a head, it is the
    /// device's, and it gives one whenever its counts are exact.
    #[test]
    fn the_head_hint_is_the_device_head_whenever_the_counts_are_exact() {
        let mut next = {
            let mut state = 0x2545_F491_4F6C_DD1Du64;
            move |n: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % n.max(1)
            }
        };
        for token_pool in [false, true] {
            let n = 37;
            let mut dev = DeviceCursor {
                head: 0,
                free: n,
                staged: 0,
                group: 0,
            };
            let mut host = Accounting::for_ring(n);
            host.record(
                1,
                Step::Set {
                    counts: dev.counts(),
                    exact: true,
                    tail: Some(0),
                },
            );
            // The device's counts after each call, as its kernels would publish them.
            let mut published = vec![(1u32, dev.counts())];
            let (mut hinted, mut unknown) = (0, 0);
            for seq in 2..4000u32 {
                let in_use = n - dev.free - dev.staged - dev.group;
                let released = next(in_use + 1);
                let step = if next(200) == 0 {
                    // A clear: the tail is known again.
                    dev = DeviceCursor {
                        head: 0,
                        free: n,
                        staged: 0,
                        group: 0,
                    };
                    Step::Set {
                        counts: dev.counts(),
                        exact: true,
                        tail: Some(0),
                    }
                } else {
                    match next(9) {
                        0..=2 => {
                            let pages = next(dev.free + 1);
                            dev.head = (dev.head + pages) % n;
                            dev.free -= pages;
                            Step::Take(pages)
                        }
                        3 | 4 if token_pool => {
                            dev.free += released;
                            Step::Release {
                                dest: Dest::FreeTail,
                                pages: Some(released),
                            }
                        }
                        3 | 4 => {
                            dev.head = (dev.head + n - released) % n;
                            dev.free += released;
                            let known = next(3) > 0;
                            Step::Release {
                                dest: Dest::FreeFront,
                                pages: known.then_some(released),
                            }
                        }
                        5 => {
                            dev.staged += released;
                            Step::Release {
                                dest: Dest::Staged,
                                pages: (next(3) > 0).then_some(released),
                            }
                        }
                        6 => {
                            if dev.staged > 0 {
                                dev.head = 0;
                                dev.free += dev.staged;
                                dev.staged = 0;
                            }
                            Step::Merge
                        }
                        7 => {
                            dev.group += released;
                            Step::Release {
                                dest: Dest::GroupOrd,
                                pages: Some(released),
                            }
                        }
                        _ => {
                            let dest = if token_pool {
                                Dest::FreeTail
                            } else {
                                dev.head = (dev.head + n - dev.group) % n;
                                Dest::FreeFront
                            };
                            dev.free += dev.group;
                            dev.group = 0;
                            Step::GroupEnd { dest }
                        }
                    }
                };
                host.record(seq, step);
                published.push((seq, dev.counts()));
                // Now and then the host reads a record a few calls old.
                if next(4) == 0 {
                    let (at, counts) = published[published.len() - 1 - next(3) as usize];
                    host.catch_up(at, seq, counts);
                }
                match host.head_hint() {
                    Some(head) => {
                        assert_eq!(u64::from(head), dev.head, "call {seq}, {step:?}");
                        hinted += 1;
                    }
                    None => {
                        assert!(
                            !host.is_exact() || host.tail().is_none(),
                            "call {seq}: exact counts and a known tail, but no head"
                        );
                        unknown += 1;
                    }
                }
            }
            // Both outcomes occur, each often.
            assert!(
                hinted > 400 && unknown > 400,
                "{hinted} hinted, {unknown} not"
            );
        }
    }
}
