//! An independent record of who holds which slot, to check every index the pool returns.
//!
//! The pool is the thing under test, so the demo keeps its own books, the way an engine's
//! `req_to_token` table implicitly does: a bitmap of held slots and an owner per page. Every
//! slot handed out is checked against them before it is written into a request's row.

use kvpool::PoolInfo;

/// Marks a page that no request holds.
const NO_OWNER: u32 = u32::MAX;

/// Slot and page ownership as the scheduler believes it to be.
#[derive(Debug)]
pub struct Ledger {
    page_size: u64,
    kv_rows: u64,
    /// Owner request id per page (page 0, the padding page, is never owned).
    owner: Vec<u32>,
    /// One bit per KV row: set while some request's row holds that slot.
    held: Vec<u64>,
    pages_held: u64,
    slots_held: u64,
}

impl Ledger {
    /// Empty books for a pool of this shape.
    pub fn new(info: &PoolInfo) -> Self {
        Self {
            page_size: u64::from(info.page_size),
            kv_rows: info.kv_rows,
            owner: vec![NO_OWNER; info.num_pages as usize + 1],
            held: vec![0; info.kv_rows.div_ceil(64) as usize],
            pages_held: 0,
            slots_held: 0,
        }
    }

    /// Pages some request holds; must equal the pool's `pages_in_use` between steps.
    pub fn pages_held(&self) -> u64 {
        self.pages_held
    }

    /// Slots some request holds.
    pub fn slots_held(&self) -> u64 {
        self.slots_held
    }

    /// Checks that `slot` may become position `row.len()` of request `req`'s row, and
    /// records it. A valid slot lies outside the padding page and inside the KV buffers,
    /// is held by nobody, sits at the row position's offset within its page (what
    /// `free_segment` and the three-part extend math rely on), and either starts a page
    /// nobody owns or directly follows the request's previous slot in a page it owns.
    pub fn claim(&mut self, req: u32, row: &[i64], slot: i64) -> Result<(), String> {
        let ps = self.page_size;
        let pos = row.len() as u64;
        if slot < ps as i64 || slot as u64 >= self.kv_rows {
            return Err(format!(
                "request {req} position {pos}: slot {slot} is outside 1..{} or in the padding page",
                self.kv_rows
            ));
        }
        let slot_u = slot as u64;
        if self.is_held(slot_u) {
            return Err(format!(
                "request {req} position {pos}: slot {slot} is already held by request {}",
                self.owner[(slot_u / ps) as usize]
            ));
        }
        if slot_u % ps != pos % ps {
            return Err(format!(
                "request {req} position {pos}: slot {slot} has page offset {} but the row needs {}",
                slot_u % ps,
                pos % ps
            ));
        }
        let page = (slot_u / ps) as usize;
        if pos.is_multiple_of(ps) {
            if self.owner[page] != NO_OWNER {
                return Err(format!(
                    "request {req} position {pos}: new page {page} (slot {slot}) is owned by request {}",
                    self.owner[page]
                ));
            }
            self.owner[page] = req;
            self.pages_held += 1;
        } else {
            let prev = row[pos as usize - 1];
            if slot != prev + 1 || self.owner[page] != req {
                return Err(format!(
                    "request {req} position {pos}: slot {slot} does not continue its page (previous slot {prev}, page owner {})",
                    self.owner[page]
                ));
            }
        }
        self.set_held(slot_u, true);
        self.slots_held += 1;
        Ok(())
    }

    /// Forgets every slot of request `req`'s row (it was freed), checking the books agree.
    pub fn release(&mut self, req: u32, row: &[i64]) -> Result<(), String> {
        let ps = self.page_size;
        // Check everything before changing anything: the owner of a page is cleared at
        // its first slot, and the page's later slots must still see it.
        if let Some(&slot) = row.iter().find(|&&slot| {
            !self.is_held(slot as u64) || self.owner[(slot as u64 / ps) as usize] != req
        }) {
            return Err(format!(
                "ledger: request {req} releases slot {slot} it does not hold"
            ));
        }
        for (pos, &slot) in row.iter().enumerate() {
            let slot = slot as u64;
            let page = (slot / ps) as usize;
            self.set_held(slot, false);
            self.slots_held -= 1;
            if (pos as u64).is_multiple_of(ps) {
                self.owner[page] = NO_OWNER;
                self.pages_held -= 1;
            }
        }
        Ok(())
    }

    fn is_held(&self, slot: u64) -> bool {
        self.held[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }

    fn set_held(&mut self, slot: u64, held: bool) {
        let word = &mut self.held[(slot / 64) as usize];
        if held {
            *word |= 1 << (slot % 64);
        } else {
            *word &= !(1 << (slot % 64));
        }
    }
}
