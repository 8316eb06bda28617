//! Random request-row workloads for the req_to_token tests (host and GPU): prefills,
//! chunked prefills, decodes, frees by row and page-table builds over a table of rows, and
//! a reference for FlashInfer's page-table layout written from its documentation.
#![allow(dead_code)]

use crate::rng::Rng;

/// One call.
#[derive(Clone, Debug)]
pub enum Op {
    /// `alloc_extend_rows`: rows grow from `prefix` (their current length) to `seq`.
    Extend {
        rows: Vec<i64>,
        prefix: Vec<i64>,
        seq: Vec<i64>,
    },
    /// `alloc_decode_rows`: rows grow by one token (`seq` = length after it).
    Decode { rows: Vec<i64>, seq: Vec<i64> },
    /// `free_rows`: rows drop `[start, end)`; `end` is the row's length, `start` 0 (finish)
    /// or page-aligned (release an over-allocation).
    Free {
        rows: Vec<i64>,
        starts: Vec<i64>,
        ends: Vec<i64>,
    },
    /// `page_table`: the first `seq` tokens of each row (rows may repeat).
    PageTable { rows: Vec<i64>, seq: Vec<i64> },
}

/// The lengths of the table's rows, advanced only by calls that succeeded.
pub struct Work {
    pub rng: Rng,
    pub lens: Vec<i64>,
    pub row_len: i64,
    pub page_size: i64,
    pub max_batch: usize,
    /// The most tokens an extend adds to a row (70; a few for verify-like steps).
    pub max_grow: u64,
}

impl Work {
    pub fn new(seed: u64, rows: usize, row_len: i64, page_size: u32, max_batch: usize) -> Self {
        Self {
            rng: Rng(seed),
            lens: vec![0; rows],
            row_len,
            page_size: i64::from(page_size),
            max_batch,
            max_grow: 70,
        }
    }

    /// Distinct rows, in random order, satisfying `keep`.
    fn pick(&mut self, keep: impl Fn(i64) -> bool, max: usize) -> Vec<i64> {
        let mut rows: Vec<i64> = (0..self.lens.len() as i64)
            .filter(|&r| keep(self.lens[r as usize]))
            .collect();
        for i in (1..rows.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            rows.swap(i, j);
        }
        let n = self.rng.range(1, max.max(1) as u64 + 1) as usize;
        rows.truncate(n.min(max));
        rows
    }

    pub fn next(&mut self) -> Op {
        let max = self.max_batch;
        let row_len = self.row_len;
        match self.rng.below(10) {
            0..=3 => {
                let rows = self.pick(|len| len < row_len, max);
                let prefix: Vec<i64> = rows.iter().map(|&r| self.lens[r as usize]).collect();
                let seq = prefix
                    .iter()
                    .map(|&p| {
                        let room = (row_len - p) as u64;
                        let grow = if self.rng.chance(20) {
                            0
                        } else {
                            self.rng.below(room.min(self.max_grow) + 1)
                        };
                        p + grow as i64
                    })
                    .collect();
                Op::Extend { rows, prefix, seq }
            }
            4..=6 => {
                let rows = self.pick(|len| len < row_len, max);
                let seq = rows.iter().map(|&r| self.lens[r as usize] + 1).collect();
                Op::Decode { rows, seq }
            }
            7 | 8 => {
                let rows = self.pick(|len| len > 0, max);
                let ends: Vec<i64> = rows.iter().map(|&r| self.lens[r as usize]).collect();
                let ps = self.page_size;
                let starts = ends
                    .iter()
                    .map(|&e| {
                        if self.rng.chance(60) {
                            0
                        } else {
                            // A page-aligned start at or before the end.
                            (self.rng.below(e as u64 + 1) as i64) / ps * ps
                        }
                    })
                    .collect();
                Op::Free { rows, starts, ends }
            }
            _ => {
                let n = self.rng.range(1, max as u64 + 1) as usize;
                let rows: Vec<i64> = (0..n)
                    .map(|_| self.rng.below(self.lens.len() as u64) as i64)
                    .collect();
                let seq = rows
                    .iter()
                    .map(|&r| {
                        let len = self.lens[r as usize];
                        if self.rng.chance(70) {
                            len
                        } else {
                            self.rng.below(len as u64 + 1) as i64
                        }
                    })
                    .collect();
                Op::PageTable { rows, seq }
            }
        }
    }

    /// Records a call that succeeded.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Extend { rows, seq, .. } | Op::Decode { rows, seq } => {
                for (&r, &s) in rows.iter().zip(seq) {
                    self.lens[r as usize] = s;
                }
            }
            Op::Free { rows, starts, .. } => {
                for (&r, &s) in rows.iter().zip(starts) {
                    self.lens[r as usize] = s;
                }
            }
            Op::PageTable { .. } => {}
        }
    }
}

/// FlashInfer's paged-KV layout, from its documentation (docs/tutorials/kv_layout.rst,
/// "Page Table Layout"): `kv_indptr` has `batch + 1` entries, starts at 0, and
/// `kv_indptr[i+1] - kv_indptr[i]` is the number of pages of request `i`;
/// `kv_indices[kv_indptr[i]..kv_indptr[i+1]]` are request `i`'s page indices in order;
/// `kv_last_page_len[i]` is the number of entries of its last page, `1 <= len <= page_size`,
/// so that `kv_len = page_size * (num_pages - 1) + last_page_len`. Page `p` of a request
/// holds its tokens `p * page_size ..`; with slot `s` in page `s / page_size`, the page index
/// is the page of the request's token `p * page_size`.
///
/// Written independently of the library: it walks every token and groups tokens into pages
/// by position, then checks each page's tokens share the page id it reports.
pub fn flashinfer_reference(
    token_slots: &[Vec<i64>],
    page_size: i64,
) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let mut indptr = vec![0i32];
    let mut indices = Vec::new();
    let mut last = Vec::new();
    for slots in token_slots {
        let mut pages: Vec<i64> = Vec::new();
        let mut in_last = 0i64;
        for (k, &slot) in slots.iter().enumerate() {
            if k as i64 % page_size == 0 {
                pages.push(slot / page_size);
                in_last = 0;
            }
            in_last += 1;
        }
        indices.extend(pages.iter().map(|&p| p as i32));
        indptr.push(indices.len() as i32);
        // kv_len = page_size * (num_pages - 1) + last_page_len (0 pages: no last page).
        if !pages.is_empty() {
            assert_eq!(
                page_size * (pages.len() as i64 - 1) + in_last,
                slots.len() as i64
            );
        }
        last.push(in_last as i32);
    }
    (indptr, indices, last)
}
