//! A deliberately simple reference model of SGLang's allocators, written from
//! `sglang-semantics.md` §1 independently of the library: a `VecDeque` free list, a set of
//! allocated pages, and a per-token loop instead of the three-part index math. It also
//! states which inputs are invalid and with which error kind, so the randomized test can
//! check that kvpool rejects exactly those and changes nothing.

use std::collections::{HashMap, HashSet, VecDeque};

use kvpool::ErrorKind;

type Res<T> = Result<T, ErrorKind>;

#[derive(Clone, Debug)]
pub struct Model {
    pub ps: u64,
    pub size: u64,
    pub need_sort: bool,
    free: VecDeque<u64>,
    staged: Vec<u64>,
    allocated: HashSet<u64>,
    /// Slots handed out of each allocated page so far (its fill point): a continuation must
    /// start right after the last of them.
    fill: HashMap<u64, u64>,
    /// Open free group: (pages freed by index, pages freed by id/segment in order).
    group: Option<(Vec<u64>, Vec<u64>)>,
    /// Pages held by live decode reservations (a subset of `allocated`): a free, rewind or
    /// continuation of one is refused with `InvalidState`.
    held: HashSet<u64>,
    /// Bumped by `clear` and `restore`: reservations made before are stale.
    epoch: u64,
}

impl Model {
    pub fn new(size: u64, ps: u64, need_sort: bool) -> Self {
        let mut m = Self {
            ps,
            size,
            need_sort,
            free: VecDeque::new(),
            staged: Vec::new(),
            allocated: HashSet::new(),
            fill: HashMap::new(),
            group: None,
            held: HashSet::new(),
            epoch: 0,
        };
        m.clear();
        m
    }

    /// Everything free; reservations made before are stale (their holds end).
    pub fn clear(&mut self) {
        self.free = (1..=self.size / self.ps).collect();
        self.staged.clear();
        self.allocated.clear();
        self.fill.clear();
        self.group = None;
        self.held.clear();
        self.epoch += 1;
    }

    /// Returns to `saved` (a clone of this model taken at a backup; the caller checks that
    /// no free group is open). Pages held when it was taken come back plainly allocated,
    /// and every reservation made before is stale.
    pub fn restore(&mut self, saved: &Model) {
        let epoch = self.epoch + 1;
        self.clone_from(saved);
        self.held.clear();
        self.epoch = epoch;
    }

    pub fn available_size(&self) -> u64 {
        (self.free.len() + self.staged.len()) as u64 * self.ps
    }

    pub fn census(&self) -> Vec<u32> {
        self.free
            .iter()
            .chain(&self.staged)
            .map(|&p| p as u32)
            .collect()
    }

    pub fn in_group(&self) -> bool {
        self.group.is_some()
    }

    pub fn merge_and_sort_free(&mut self) {
        if !self.staged.is_empty() {
            self.free.extend(self.staged.drain(..));
            self.free.make_contiguous().sort();
        }
    }

    /// Records that `slot` was handed out: its page is filled up to it.
    fn hand_out(&mut self, slot: i64) -> i64 {
        let slot_u = slot as u64;
        self.fill.insert(slot_u / self.ps, slot_u % self.ps + 1);
        slot
    }

    fn take(&mut self) -> u64 {
        let page = self.free.pop_front().unwrap();
        self.allocated.insert(page);
        page
    }

    fn ensure(&mut self, trigger: u64, needed: u64) -> Res<()> {
        if trigger > self.free.len() as u64 {
            self.merge_and_sort_free();
        }
        if needed > self.free.len() as u64 {
            return Err(ErrorKind::OutOfSlots);
        }
        Ok(())
    }

    pub fn alloc(&mut self, n: u64) -> Res<Vec<i64>> {
        if !n.is_multiple_of(self.ps) {
            return Err(ErrorKind::Unaligned);
        }
        let pages = n / self.ps;
        self.ensure(pages, pages)?;
        let mut out = Vec::new();
        for _ in 0..pages {
            let page = self.take();
            for k in 0..self.ps {
                out.push(self.hand_out((page * self.ps + k) as i64));
            }
        }
        Ok(out)
    }

    /// Slot index checks shared by `last_loc` and frees.
    fn slot(&self, value: i64) -> Res<u64> {
        if value == 0 {
            return Err(ErrorKind::ReservedSlot);
        }
        if value < 0 || value as u64 >= self.size + self.ps {
            return Err(ErrorKind::IndexOutOfRange);
        }
        if (value as u64) < self.ps {
            return Err(ErrorKind::ReservedSlot);
        }
        Ok(value as u64)
    }

    fn check_lengths(&self, prefix: &[i64], seq: &[i64], total: u64) -> Res<()> {
        for (&p, &s) in prefix.iter().zip(seq) {
            if p < 0 || s < p || s as u64 > self.size {
                return Err(ErrorKind::InvalidLengths);
            }
        }
        let sum: i64 = prefix.iter().zip(seq).map(|(p, s)| s - p).sum();
        if sum as u64 != total {
            return Err(ErrorKind::InvalidLengths);
        }
        Ok(())
    }

    /// `last_loc` checks; `writes_page` says whether the request writes into its page.
    fn check_last_locs(&self, prefix: &[u64], last_loc: &[i64], writes: &[bool]) -> Res<()> {
        let mut claimed = HashSet::new();
        for i in 0..prefix.len() {
            if prefix[i] == 0 {
                if last_loc[i] != -1 {
                    return Err(ErrorKind::LastLocMismatch);
                }
                continue;
            }
            let slot = self.slot(last_loc[i])?;
            if self.held.contains(&(slot / self.ps)) {
                return Err(ErrorKind::InvalidState);
            }
            if !self.allocated.contains(&(slot / self.ps)) {
                return Err(ErrorKind::NotAllocated);
            }
            if (slot + 1) % self.ps != prefix[i] % self.ps {
                return Err(ErrorKind::LastLocMismatch);
            }
            if self.fill[&(slot / self.ps)] != slot % self.ps + 1 {
                return Err(ErrorKind::LastLocMismatch);
            }
            if writes[i] && !claimed.insert(slot / self.ps) {
                return Err(ErrorKind::LastLocMismatch);
            }
        }
        Ok(())
    }

    pub fn alloc_extend(
        &mut self,
        prefix: &[i64],
        seq: &[i64],
        last_loc: &[i64],
        total: u64,
        out_len: usize,
    ) -> Res<Vec<i64>> {
        self.check_lengths(prefix, seq, total)?;
        if (out_len as u64) < total {
            return Err(ErrorKind::BufferTooSmall);
        }
        let ps = self.ps;
        let pre: Vec<u64> = prefix.iter().map(|&p| p as u64).collect();
        // A request writes into its prefix's page when the prefix ends mid-page and grows.
        let writes: Vec<bool> = (0..pre.len())
            .map(|i| !pre[i].is_multiple_of(ps) && seq[i] as u64 > pre[i])
            .collect();
        self.check_last_locs(&pre, last_loc, &writes)?;
        // Pages started = multiples of ps in [prefix, seq).
        let needed: u64 = (0..pre.len())
            .map(|i| (pre[i]..seq[i] as u64).filter(|t| t % ps == 0).count() as u64)
            .sum();
        let trigger = if ps > 1 {
            total / ps + seq.len() as u64 + 1
        } else {
            needed
        };
        self.ensure(trigger, needed)?;
        let mut out = Vec::new();
        for i in 0..pre.len() {
            let mut page = 0;
            for t in pre[i]..seq[i] as u64 {
                let slot = if t % ps == 0 {
                    page = self.take();
                    (page * ps) as i64
                } else if page == 0 {
                    // Still inside the prefix's last page.
                    last_loc[i] + (t - pre[i]) as i64 + 1
                } else {
                    (page * ps + t % ps) as i64
                };
                out.push(self.hand_out(slot));
            }
        }
        Ok(out)
    }

    pub fn alloc_decode(&mut self, seq: &[i64], last_loc: &[i64], out_len: usize) -> Res<Vec<i64>> {
        if seq.iter().any(|&s| s < 1 || s as u64 > self.size) {
            return Err(ErrorKind::InvalidLengths);
        }
        if out_len < seq.len() {
            return Err(ErrorKind::BufferTooSmall);
        }
        let ps = self.ps;
        let pre: Vec<u64> = seq.iter().map(|&s| s as u64 - 1).collect();
        let writes: Vec<bool> = pre.iter().map(|p| p % ps != 0).collect();
        self.check_last_locs(&pre, last_loc, &writes)?;
        let needed = writes.iter().filter(|w| !**w).count() as u64;
        self.ensure(seq.len() as u64, needed)?;
        Ok((0..seq.len())
            .map(|i| {
                let slot = if writes[i] {
                    last_loc[i] + 1
                } else {
                    (self.take() * ps) as i64
                };
                self.hand_out(slot)
            })
            .collect())
    }

    /// Moves each `last_kept` slot's page back to end at it (speculative decoding).
    pub fn rewind(&mut self, last_kept: &[i64]) -> Res<()> {
        let mut pages = HashSet::new();
        for &value in last_kept {
            let slot = self.slot(value)?;
            let page = slot / self.ps;
            if self.held.contains(&page) {
                return Err(ErrorKind::InvalidState);
            }
            if !self.allocated.contains(&page) {
                return Err(ErrorKind::NotAllocated);
            }
            if slot % self.ps >= self.fill[&page] {
                return Err(ErrorKind::LastLocMismatch);
            }
            if !pages.insert(page) {
                return Err(ErrorKind::LastLocMismatch);
            }
        }
        for &slot in last_kept {
            self.hand_out(slot);
        }
        Ok(())
    }

    /// A page named by a free: allocated and not held (`InvalidState`), else `DoubleFree`.
    fn freeable(&self, page: u64) -> Res<()> {
        if self.held.contains(&page) {
            Err(ErrorKind::InvalidState)
        } else if self.allocated.contains(&page) {
            Ok(())
        } else {
            Err(ErrorKind::DoubleFree)
        }
    }

    pub fn free(&mut self, indices: &[i64]) -> Res<()> {
        let mut seen = HashSet::new();
        let mut pages = Vec::new();
        for &index in indices {
            let slot = self.slot(index)?;
            if !seen.insert(slot) {
                return Err(ErrorKind::DoubleFree);
            }
            self.freeable(slot / self.ps)?;
            if !pages.contains(&(slot / self.ps)) {
                pages.push(slot / self.ps);
            }
        }
        if self.ps > 1 {
            pages.sort();
        }
        self.apply_free(pages, self.ps > 1);
        Ok(())
    }

    pub fn free_pages(&mut self, ids: &[i64]) -> Res<()> {
        let mut pages = Vec::new();
        for &id in ids {
            if id == 0 {
                return Err(ErrorKind::ReservedSlot);
            }
            if id < 0 || id as u64 > self.size / self.ps {
                return Err(ErrorKind::IndexOutOfRange);
            }
            self.freeable(id as u64)?;
            if pages.contains(&(id as u64)) {
                return Err(ErrorKind::DoubleFree);
            }
            pages.push(id as u64);
        }
        self.apply_free(pages, false);
        Ok(())
    }

    pub fn free_segment(&mut self, row: &[i64], start: usize, len: usize) -> Res<()> {
        if start + len > row.len() {
            return Err(ErrorKind::BufferTooSmall);
        }
        let segment = &row[start..start + len];
        if self.ps == 1 {
            return self.free(segment);
        }
        if len == 0 {
            return Ok(()); // SGLang returns on an empty segment before its alignment check
        }
        let ps = self.ps as usize;
        if !start.is_multiple_of(ps) {
            return Err(ErrorKind::Unaligned);
        }
        let mut pages = Vec::new();
        for chunk in segment.chunks(ps) {
            let head = self.slot(chunk[0])?;
            if head % self.ps != 0 {
                return Err(ErrorKind::Unaligned);
            }
            if chunk
                .iter()
                .enumerate()
                .any(|(j, &s)| s != (head + j as u64) as i64)
            {
                return Err(ErrorKind::InvalidArgument);
            }
            self.freeable(head / self.ps)?;
            if pages.contains(&(head / self.ps)) {
                return Err(ErrorKind::DoubleFree);
            }
            pages.push(head / self.ps);
        }
        self.apply_free(pages, false);
        Ok(())
    }

    fn apply_free(&mut self, pages: Vec<u64>, by_index: bool) {
        for page in &pages {
            self.allocated.remove(page);
        }
        match &mut self.group {
            Some((index_group, ordered)) => {
                if by_index {
                    index_group.extend(pages);
                } else {
                    ordered.extend(pages);
                }
            }
            None => self.release(pages),
        }
    }

    fn release(&mut self, pages: Vec<u64>) {
        if self.need_sort {
            self.staged.extend(pages);
        } else if self.ps == 1 {
            self.free.extend(pages);
        } else {
            for page in pages.into_iter().rev() {
                self.free.push_front(page);
            }
        }
    }

    /// A decode reservation (`docs/graph-decode.md`): the pages `steps` successive decodes of
    /// the batch take, taken at once (each step with `alloc_decode`'s merge rule, so staged
    /// frees are merged at the step those decodes would merge them; a shortage at any step
    /// refuses it all, nothing changed), fill points advanced as if every step ran. Returns the
    /// slots of each step (step-major) and the pages in the order taken. Until the
    /// reservation ends (finish, abandon, clear, restore) it holds every page it hands slots
    /// out of: its new pages and each request's partly filled last page (`lens[i] % ps !=
    /// 0`); a free, rewind or continuation of a held page is refused with `InvalidState`.
    #[allow(dead_code)]
    pub fn reserve_decode(&mut self, lens: &[i64], last_loc: &[i64], steps: u32) -> Res<Reserved> {
        if steps == 0 || steps > 1024 {
            return Err(ErrorKind::InvalidArgument);
        }
        let k = u64::from(steps);
        if lens.iter().any(|&l| l < 0 || l as u64 + k > self.size) {
            return Err(ErrorKind::InvalidLengths);
        }
        let ps = self.ps;
        let pre: Vec<u64> = lens.iter().map(|&l| l as u64).collect();
        let writes: Vec<bool> = pre.iter().map(|p| p % ps != 0).collect();
        self.check_last_locs(&pre, last_loc, &writes)?;
        // K plain decodes, each with alloc_decode's merge rule and shortage check, on a copy:
        // a shortage at any step refuses the whole reservation with nothing changed.
        let needed = |s: u64| pre.iter().filter(|&&p| (p + s).is_multiple_of(ps)).count() as u64;
        let mut trial = self.clone();
        for s in 0..k {
            trial.ensure(pre.len() as u64, needed(s))?;
            for _ in 0..needed(s) {
                trial.take();
            }
        }
        let mut prev = last_loc.to_vec();
        let mut res = Reserved {
            lens: lens.to_vec(),
            slots: Vec::new(),
            pages: Vec::new(),
            taken_by: vec![0],
            continued: (0..pre.len())
                .filter(|&i| writes[i])
                .map(|i| last_loc[i] as u64 / ps)
                .collect(),
            epoch: self.epoch,
            finished: false,
        };
        for s in 0..k {
            self.ensure(pre.len() as u64, needed(s))
                .expect("the copy ran the same steps");
            let mut row = Vec::new();
            for (i, &p) in pre.iter().enumerate() {
                let slot = if (p + s) % ps == 0 {
                    let page = self.take();
                    res.pages.push(page);
                    (page * ps) as i64
                } else {
                    prev[i] + 1
                };
                row.push(self.hand_out(slot));
            }
            prev.clone_from(&row);
            res.slots.push(row);
            res.taken_by.push(res.pages.len());
        }
        self.held.extend(res.pages.iter().chain(&res.continued));
        Ok(res)
    }

    /// Whether `res` is live: neither finished nor abandoned, and made since the last clear
    /// or restore.
    #[allow(dead_code)]
    pub fn is_live(&self, res: &Reserved) -> bool {
        !res.finished && res.epoch == self.epoch
    }

    /// Ends a live reservation after `used` steps (the caller checks that `used` is the
    /// number of steps taken): the pages no used step touched go back to the front of the
    /// free list in the order taken (never staged, not into a free group), each request's
    /// partly used page is rewound to its last used slot, and the holds end. A finished or
    /// stale reservation: `InvalidState`, nothing changed. (While the reservation was live
    /// its pages were held, so none of them can have been freed, rewound or continued:
    /// what it returns and rewinds is exactly what it took and advanced.)
    #[allow(dead_code)]
    pub fn finish_reservation(&mut self, res: &mut Reserved, used: usize) -> Res<()> {
        if !self.is_live(res) {
            return Err(ErrorKind::InvalidState);
        }
        let ps = self.ps;
        if used < res.slots.len() && ps > 1 {
            for (i, &l) in res.lens.iter().enumerate() {
                if !(l as u64 + used as u64).is_multiple_of(ps) {
                    let kept = res.slots[used][i] as u64 - 1;
                    debug_assert!(self.held.contains(&(kept / ps)));
                    self.hand_out(kept as i64);
                }
            }
        }
        self.end_holds(res);
        for page in res.pages[res.taken_by[used]..].iter().rev() {
            debug_assert!(self.allocated.contains(page));
            self.allocated.remove(page);
            self.free.push_front(*page);
        }
        Ok(())
    }

    /// What `kvp_decode_reservation_free` does with a reservation: a live one ends its holds
    /// and counts as finished, its pages staying allocated with their fill points as if
    /// every reserved step had run; a finished or stale one changes nothing.
    #[allow(dead_code)]
    pub fn abandon_reservation(&mut self, res: &mut Reserved) {
        if self.is_live(res) {
            self.end_holds(res);
        }
    }

    #[allow(dead_code)]
    fn end_holds(&mut self, res: &mut Reserved) {
        for page in res.pages.iter().chain(&res.continued) {
            let was_held = self.held.remove(page);
            debug_assert!(was_held, "page {page} of a live reservation not held");
        }
        res.finished = true;
    }

    /// Whether `page` is held by a live decode reservation.
    #[allow(dead_code)]
    pub fn is_held(&self, page: u64) -> bool {
        self.held.contains(&page)
    }

    /// Whether `page` is allocated (not free, staged or in an open free group).
    #[allow(dead_code)]
    pub fn is_allocated(&self, page: u64) -> bool {
        self.allocated.contains(&page)
    }

    pub fn free_group_begin(&mut self) -> Res<()> {
        if self.group.is_some() {
            return Err(ErrorKind::InvalidState);
        }
        self.group = Some((Vec::new(), Vec::new()));
        Ok(())
    }

    pub fn free_group_end(&mut self) -> Res<()> {
        let (mut by_index, ordered) = self.group.take().ok_or(ErrorKind::InvalidState)?;
        by_index.sort();
        if !by_index.is_empty() {
            self.release(by_index);
        }
        if !ordered.is_empty() {
            self.release(ordered);
        }
        Ok(())
    }
}

/// A reservation of the model (`Model::reserve_decode`).
#[allow(dead_code)]
#[derive(Clone, Debug)]
pub struct Reserved {
    pub lens: Vec<i64>,
    /// `slots[s][i]`: the slot of request `i` at step `s`.
    pub slots: Vec<Vec<i64>>,
    /// The pages taken, in order.
    pub pages: Vec<u64>,
    /// `taken_by[s]`: pages taken by the first `s` steps.
    pub taken_by: Vec<usize>,
    /// The partly filled last pages the first steps continue (requests with `lens[i] % ps
    /// != 0`), held with `pages`.
    pub continued: Vec<u64>,
    /// The model's epoch when it was made (`Model::is_live`).
    epoch: u64,
    /// Finished or abandoned.
    finished: bool,
}
