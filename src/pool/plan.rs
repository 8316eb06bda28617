//! Host-side planning of batched allocations: length validation, SGLang's three-part
//! extend index math, and the exact new-page counts (`get_num_new_pages`), all computed from
//! host copies of the lengths so no backend ever has to read device memory to size a call.

use super::config::Layout;
use super::error::{fail, ErrorKind, PoolError};

/// Rounds `x` up to a multiple of `ps`.
#[inline]
pub fn ceil_page(x: u64, ps: u64) -> u64 {
    x.div_ceil(ps) * ps
}

/// Rounds `x` down to a multiple of `ps`.
#[inline]
pub fn floor_page(x: u64, ps: u64) -> u64 {
    x / ps * ps
}

/// One request of an extend batch: its cached prefix and its length after the extend.
///
/// The new tokens `prefix..seq` are laid out in up to three parts:
/// 1. the rest of the prefix's partial last page, at `last_loc + 1 + k`;
/// 2. whole new pages from the free list;
/// 3. a new partial tail page (the request's last new page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendShape {
    /// Tokens already in the KV cache.
    pub prefix: u64,
    /// Tokens after the extend.
    pub seq: u64,
}

impl ExtendShape {
    /// Tokens this extend writes.
    pub fn tokens(&self) -> u64 {
        self.seq - self.prefix
    }

    /// Part 1: tokens that finish the prefix's partial page.
    pub fn part1(&self, ps: u64) -> u64 {
        self.seq.min(ceil_page(self.prefix, ps)) - self.prefix
    }

    /// Part 2: tokens on whole new pages.
    pub fn part2(&self, ps: u64) -> u64 {
        if self.prefix + self.part1(ps) == self.seq {
            return 0;
        }
        floor_page(self.seq, ps) - ceil_page(self.prefix, ps)
    }

    /// Part 3: tokens on the new partial tail page.
    pub fn part3(&self, ps: u64) -> u64 {
        if self.prefix + self.part1(ps) + self.part2(ps) == self.seq {
            return 0;
        }
        self.seq - floor_page(self.seq, ps)
    }

    /// Pages taken from the free list: `ceil(seq/ps) - ceil(prefix/ps)`.
    pub fn new_pages(&self, ps: u64) -> u64 {
        self.seq.div_ceil(ps) - self.prefix.div_ceil(ps)
    }
}

/// Whether a decode step whose sequence has `seq` tokens after the new one needs a new page.
#[inline]
pub fn decode_needs_page(seq: u64, ps: u64) -> bool {
    (seq - 1).is_multiple_of(ps)
}

/// A validated extend batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendPlan {
    /// Exact pages the batch takes from the free list.
    pub new_pages: u64,
    /// Tokens the batch writes (`extend_num_tokens`).
    pub tokens: u64,
}

/// Validates an extend batch's host lengths and counts the pages it needs.
pub(crate) fn plan_extend(
    layout: &Layout,
    prefix_lens: &[i64],
    seq_lens: &[i64],
    extend_num_tokens: u64,
) -> Result<ExtendPlan, PoolError> {
    let plan = plan_extend_lengths(layout, prefix_lens, seq_lens)?;
    if plan.tokens != extend_num_tokens {
        return fail(
            ErrorKind::InvalidLengths,
            format!(
                "extend_num_tokens is {extend_num_tokens} but the lengths add up to {} \
                 (sum of seq_lens - prefix_lens)",
                plan.tokens
            ),
        );
    }
    Ok(plan)
}

/// [`plan_extend`] without the `extend_num_tokens` check: validates the lengths (same
/// checks, same errors, in the same order) and computes both the new pages and the tokens.
/// What the pools' `extend_need` queries run.
pub(crate) fn plan_extend_lengths(
    layout: &Layout,
    prefix_lens: &[i64],
    seq_lens: &[i64],
) -> Result<ExtendPlan, PoolError> {
    if prefix_lens.len() != seq_lens.len() {
        return fail(
            ErrorKind::InvalidLengths,
            format!(
                "prefix_lens has {} entries but seq_lens has {}",
                prefix_lens.len(),
                seq_lens.len()
            ),
        );
    }
    let pages_of = PageCount::new(layout.page_size);
    // A valid request adds at most `size` tokens and `size` pages, so the sums cannot pass
    // 2^64 unless `batch * size` does: only then can a batch of valid lengths overflow
    // them, and it is summed (checked) request by request.
    let may_overflow = prefix_lens.len() as u128 * u128::from(layout.size) > u128::from(u64::MAX);
    if let Some(shift) = pages_of.shift.filter(|_| !may_overflow) {
        let sums = batch_sums::extend(prefix_lens, seq_lens, layout.size, shift);
        if !sums.bad {
            return Ok(ExtendPlan {
                new_pages: sums.pages,
                tokens: sums.tokens,
            });
        }
    }
    // A page size that is not a power of two, an invalid length to name, or sums that may
    // overflow (checked after every length is validated, so an invalid one is still named).
    let (mut tokens, mut new_pages) = (Some(0u64), Some(0u64));
    for (i, (&prefix, &seq)) in prefix_lens.iter().zip(seq_lens).enumerate() {
        let shape = extend_shape(layout, i, prefix, seq)?;
        tokens = tokens.and_then(|t| t.checked_add(shape.tokens()));
        let pages = pages_of.ceil(shape.seq) - pages_of.ceil(shape.prefix);
        new_pages = new_pages.and_then(|p| p.checked_add(pages));
    }
    match (tokens, new_pages) {
        (Some(tokens), Some(new_pages)) => Ok(ExtendPlan { new_pages, tokens }),
        _ => fail(
            ErrorKind::InvalidLengths,
            format!(
                "the {} requests' new tokens (sum of seq_lens - prefix_lens) add up past \
                 2^64 - 1",
                seq_lens.len()
            ),
        ),
    }
}

/// Validates request `i`'s lengths.
pub(crate) fn extend_shape(
    layout: &Layout,
    i: usize,
    prefix: i64,
    seq: i64,
) -> Result<ExtendShape, PoolError> {
    if prefix < 0 {
        return fail(
            ErrorKind::InvalidLengths,
            format!("prefix_lens[{i}] = {prefix} is negative"),
        );
    }
    if seq < prefix {
        return fail(
            ErrorKind::InvalidLengths,
            format!("seq_lens[{i}] = {seq} is less than prefix_lens[{i}] = {prefix}"),
        );
    }
    if seq as u64 > layout.size {
        return fail(
            ErrorKind::InvalidLengths,
            format!(
                "seq_lens[{i}] = {seq} exceeds the pool size {}",
                layout.size
            ),
        );
    }
    Ok(ExtendShape {
        prefix: prefix as u64,
        seq: seq as u64,
    })
}

/// `ceil(x / page_size)` and `x % page_size` with a shift and a mask when the page size is a
/// power of two (the usual case): planning a 4,096-request batch is then a few microseconds,
/// not tens spent in 64-bit divisions.
#[derive(Clone, Copy)]
struct PageCount {
    ps: u64,
    shift: Option<u32>,
}

impl PageCount {
    fn new(page_size: u32) -> Self {
        Self {
            ps: u64::from(page_size),
            shift: page_size
                .is_power_of_two()
                .then(|| page_size.trailing_zeros()),
        }
    }

    #[inline]
    fn ceil(&self, x: u64) -> u64 {
        match self.shift {
            Some(shift) => (x + self.ps - 1) >> shift,
            None => x.div_ceil(self.ps),
        }
    }

    #[inline]
    fn rem(&self, x: u64) -> u64 {
        match self.shift {
            Some(_) => x & (self.ps - 1),
            None => x % self.ps,
        }
    }
}

/// The sums a batch plan needs, in one branch-free pass that the compiler vectorizes (and,
/// where the CPU has AVX-512F or AVX2, in a copy compiled for it, picked at run time): on
/// this project's CPU VM (AVX-512) a 4,096-request extend is planned in 0.6 µs at page size
/// 1 (four instructions a vector of 8 requests: about the rate its 64 KiB of lengths stream
/// from L2) to 0.8 µs at larger pages (nine), a decode in 0.3 µs, where validating request
/// by request (what the slow path does, to name the first invalid length) takes several.
/// Power-of-two page sizes only (a shift). The sums wrap past 2^64: the caller runs this
/// pass only on batches whose valid lengths cannot add up that far (`batch * size < 2^64`).
mod batch_sums {
    /// Whether any length is invalid, and the sums (meaningless if so).
    pub(super) struct Sums {
        pub bad: bool,
        pub tokens: u64,
        pub pages: u64,
    }

    // The checks are unsigned comparisons, so a lane needs few vector instructions: a
    // negative length read as u64 is at least 2^63, above any pool size. Each pass comes in
    // two forms, by `MAX`: where the instruction set has an unsigned 64-bit maximum
    // (AVX-512F: vpmaxuq), a running maximum, compared with `size` once after the loop,
    // checks the upper bound in one instruction a vector; elsewhere top bits and compares
    // are OR-ed into a word (AVX2 has no 64-bit maximum: LLVM emulates one with two XORs, a
    // compare and a blend, more than the OR form costs). Both forms give the same `bad` for
    // every input (the tests compare them at every boundary).
    //
    // Extends, with `size < 2^63`: request (p, s) is valid (0 <= p <= s <= size as i64)
    // iff, read as u64,
    //   (a) `s <= size`, and
    //   (b) the top bit of `p | (s - p)` (wrapping) is clear.
    // - Valid: s <= size; p < 2^63; `s - p` lies in 0..=s, below 2^63.
    // - Invalid: if s < 0 or s > size, (a) fails (a negative s reads as 2^63 or more).
    //   Otherwise 0 <= s <= size < 2^63, and either p < 0 (the top bit of p is set) or
    //   s < p <= i64::MAX, where `s - p` wraps to 2^64 - (p - s) with p - s in 1..2^63:
    //   2^63 + 1 or more, top bit set.
    // `MAX`: (a) holds for every request iff the batch's largest `s` (unsigned) is at most
    // `size`, and (b) iff the OR of every `p | (s - p)` (one ternary-logic op a vector) has
    // its top bit clear. Without: (a) iff the top bit of `s | (size - s)` is clear (a
    // negative s has it; for 0 <= s < 2^63, `size - s` wraps to 2^63 or more iff s > size),
    // so each request ORs `s | p | (size - s) | (s - p)` into the word. `s - p` is the
    // request's token count, needed anyway. The OR starts at `size`, so a pool of 2^63 slots
    // or more (never made: under 2^32 pages of at most 2^31 slots) sends every batch to the
    // request-by-request path, where neither identity holds.
    #[inline(always)]
    pub(super) fn extend_generic<const MAX: bool>(
        prefix: &[i64],
        seq: &[i64],
        size: u64,
        shift: u32,
    ) -> Sums {
        // Page size 1 (SGLang's default): a request's new pages are its tokens, and the
        // loop drops the five instructions a vector that count pages.
        if shift == 0 {
            extend_pass::<MAX, false>(prefix, seq, size, 0)
        } else {
            extend_pass::<MAX, true>(prefix, seq, size, shift)
        }
    }

    #[inline(always)]
    fn extend_pass<const MAX: bool, const PAGES: bool>(
        prefix: &[i64],
        seq: &[i64],
        size: u64,
        shift: u32,
    ) -> Sums {
        let round = (1u64 << shift) - 1;
        let (mut max_s, mut high, mut tokens, mut pages) = (0u64, size, 0u64, 0u64);
        for (&p, &s) in prefix.iter().zip(seq) {
            let (p, s) = (p as u64, s as u64);
            let extend = s.wrapping_sub(p);
            if MAX {
                max_s = max_s.max(s);
                high |= p | extend;
            } else {
                high |= s | p | size.wrapping_sub(s) | extend;
            }
            tokens = tokens.wrapping_add(extend);
            if PAGES {
                // ceil(s / P) - ceil(p / P) = ((p + P - 1) % P + (s - p)) / P for p <= s:
                // the prefix's last page has P - 1 - (p + P - 1) % P slots left, which the
                // tokens fill first. Five instructions a vector where the two ceilings took
                // six (0.94-0.97x the time at 1,024-4,096 requests: BENCHMARKS.md).
                let last_page_used = p.wrapping_add(round) & round;
                pages = pages.wrapping_add(last_page_used.wrapping_add(extend) >> shift);
            }
        }
        Sums {
            bad: (MAX && max_s > size) || high >> 63 != 0,
            tokens,
            // With a shift of 0, `ceil(s) - ceil(p)` is `s - p`: the same wrapping sum.
            pages: if PAGES { pages } else { tokens },
        }
    }

    // Decodes, with `size < 2^63`: s is valid (1 <= s <= size as i64) iff `s - 1` (wrapping,
    // as u64) is below `size`: s = 0 wraps to 2^64 - 1, a negative s reads as 2^63 or more
    // so `s - 1` is 2^63 - 1 or more, and a positive s gives `s - 1 < size` iff s <= size.
    // `MAX`: every request passes iff the batch's largest `s - 1` is below `size`; without,
    // each request ORs its comparison into a word. A pool of 2^63 slots or more goes to the
    // request-by-request path (there a negative s would pass).
    #[inline(always)]
    pub(super) fn decode_generic<const MAX: bool>(seq: &[i64], size: u64, shift: u32) -> Sums {
        // Page size 1: every decode step takes a page.
        if shift == 0 {
            decode_pass::<MAX, false>(seq, size, 0)
        } else {
            decode_pass::<MAX, true>(seq, size, shift)
        }
    }

    #[inline(always)]
    fn decode_pass<const MAX: bool, const PAGES: bool>(seq: &[i64], size: u64, shift: u32) -> Sums {
        let mask = (1u64 << shift) - 1;
        // `bad` is a u64 mask, not a bool: a bool accumulator costs a pack per lane.
        let (mut max_before, mut bad, mut pages) = (0u64, 0u64, 0u64);
        for &s in seq {
            let before = (s as u64).wrapping_sub(1);
            if MAX {
                max_before = max_before.max(before);
            } else {
                bad |= u64::from(before >= size);
            }
            if PAGES {
                pages += u64::from(before & mask == 0);
            }
        }
        let n = seq.len() as u64;
        Sums {
            // (An empty batch is not bad, in either form, even for a size of 0.)
            bad: (MAX && n > 0 && max_before >= size) || bad != 0 || size >> 63 != 0,
            tokens: n,
            pages: if PAGES { pages } else { n },
        }
    }

    /// The copies of the pass, each compiled for an instruction set (x86-64: AVX-512F has
    /// an unsigned 64-bit maximum, unsigned compares and mask registers; AVX2 lacks all
    /// three).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Simd {
        Generic,
        #[cfg(target_arch = "x86_64")]
        Avx2(Detected),
        #[cfg(target_arch = "x86_64")]
        Avx512(Detected),
    }

    /// That the CPU has the instruction set of the variant holding it: made only by
    /// `Simd::best` and `Simd::available`, after detection, so no other code can name a
    /// copy the CPU cannot run.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct Detected(());

    impl Simd {
        /// The best copy this CPU runs (detected once, then a cached load).
        pub(super) fn best() -> Self {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    return Simd::Avx512(Detected(()));
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    return Simd::Avx2(Detected(()));
                }
            }
            Simd::Generic
        }

        /// Every copy this CPU runs (tests compare them).
        #[cfg(test)]
        pub(super) fn available() -> Vec<Self> {
            let mut all = vec![Simd::Generic];
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    all.push(Simd::Avx2(Detected(())));
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    all.push(Simd::Avx512(Detected(())));
                }
            }
            all
        }

        /// `extend_generic` as compiled for this instruction set.
        pub(super) fn extend(self, prefix: &[i64], seq: &[i64], size: u64, shift: u32) -> Sums {
            match self {
                Simd::Generic => extend_generic::<false>(prefix, seq, size, shift),
                // SAFETY (both): `Detected` says the CPU has the instruction set.
                #[cfg(target_arch = "x86_64")]
                Simd::Avx2(_) => unsafe { x86::extend_avx2(prefix, seq, size, shift) },
                #[cfg(target_arch = "x86_64")]
                Simd::Avx512(_) => unsafe { x86::extend_avx512(prefix, seq, size, shift) },
            }
        }

        /// `decode_generic` as compiled for this instruction set.
        pub(super) fn decode(self, seq: &[i64], size: u64, shift: u32) -> Sums {
            match self {
                Simd::Generic => decode_generic::<false>(seq, size, shift),
                // SAFETY (both): `Detected` says the CPU has the instruction set.
                #[cfg(target_arch = "x86_64")]
                Simd::Avx2(_) => unsafe { x86::decode_avx2(seq, size, shift) },
                #[cfg(target_arch = "x86_64")]
                Simd::Avx512(_) => unsafe { x86::decode_avx512(seq, size, shift) },
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use super::{decode_generic, extend_generic, Sums};

        /// Both passes compiled for one instruction set (`$feature`): the generic code, with
        /// the running maximum where the set has the instruction (`$max`).
        macro_rules! compiled_for {
            ($feature:literal, $max:literal, $extend:ident, $decode:ident) => {
                #[target_feature(enable = $feature)]
                pub(super) unsafe fn $extend(
                    prefix: &[i64],
                    seq: &[i64],
                    size: u64,
                    shift: u32,
                ) -> Sums {
                    extend_generic::<$max>(prefix, seq, size, shift)
                }

                #[target_feature(enable = $feature)]
                pub(super) unsafe fn $decode(seq: &[i64], size: u64, shift: u32) -> Sums {
                    decode_generic::<$max>(seq, size, shift)
                }
            };
        }

        compiled_for!("avx2", false, extend_avx2, decode_avx2);
        compiled_for!("avx512f", true, extend_avx512, decode_avx512);
    }

    pub(super) fn extend(prefix: &[i64], seq: &[i64], size: u64, shift: u32) -> Sums {
        Simd::best().extend(prefix, seq, size, shift)
    }

    pub(super) fn decode(seq: &[i64], size: u64, shift: u32) -> Sums {
        Simd::best().decode(seq, size, shift)
    }
}

/// Validates a decode batch's lengths (after the new token) and counts the new pages.
pub(crate) fn plan_decode(layout: &Layout, seq_lens: &[i64]) -> Result<u64, PoolError> {
    let pages_of = PageCount::new(layout.page_size);
    if let Some(shift) = pages_of.shift {
        let sums = batch_sums::decode(seq_lens, layout.size, shift);
        if !sums.bad {
            return Ok(sums.pages);
        }
    }
    // A page size that is not a power of two, or an invalid length to name.
    let mut new_pages = 0;
    for (i, &seq) in seq_lens.iter().enumerate() {
        if seq < 1 {
            return fail(
                ErrorKind::InvalidLengths,
                format!("seq_lens[{i}] = {seq}; decode lengths count the new token, so they are at least 1"),
            );
        }
        if seq as u64 > layout.size {
            return fail(
                ErrorKind::InvalidLengths,
                format!(
                    "seq_lens[{i}] = {seq} exceeds the pool size {}",
                    layout.size
                ),
            );
        }
        new_pages += u64::from(pages_of.rem(seq as u64 - 1) == 0);
    }
    Ok(new_pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(prefix: u64, seq: u64, ps: u64) -> (u64, u64, u64, u64) {
        let s = ExtendShape { prefix, seq };
        (s.part1(ps), s.part2(ps), s.part3(ps), s.new_pages(ps))
    }

    #[test]
    fn three_parts_of_the_worked_example() {
        // page 4, prefix 2, seq 11: [2,3] + one whole page + a tail of 3.
        assert_eq!(parts(2, 11, 4), (2, 4, 3, 2));
    }

    #[test]
    fn single_part_cases() {
        assert_eq!(parts(1, 3, 4), (2, 0, 0, 0)); // part 1 only
        assert_eq!(parts(4, 12, 4), (0, 8, 0, 2)); // part 2 only
        assert_eq!(parts(4, 6, 4), (0, 0, 2, 1)); // part 3 only
        assert_eq!(parts(0, 3, 4), (0, 0, 3, 1)); // empty prefix, tail only
        assert_eq!(parts(5, 5, 4), (0, 0, 0, 0)); // zero extend
    }

    #[test]
    fn parts_add_up_for_all_small_shapes() {
        for ps in [1, 2, 3, 4, 16] {
            for prefix in 0..40 {
                for seq in prefix..60 {
                    let (p1, p2, p3, pages) = parts(prefix, seq, ps);
                    assert_eq!(p1 + p2 + p3, seq - prefix, "ps {ps} {prefix}..{seq}");
                    assert_eq!(p2 % ps, 0);
                    assert_eq!(pages, p2 / ps + u64::from(p3 > 0));
                }
            }
        }
    }

    /// A seeded generator of numbers below its argument (an LCG: the tests need a fixed,
    /// cheap sequence, not quality).
    fn below(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut state = seed;
        move |n| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        }
    }

    /// The branch-free pass and the request-by-request path agree on every batch: the
    /// same sums when all lengths are valid, the same first invalid length otherwise.
    #[test]
    fn the_fast_pass_agrees_with_request_by_request_planning() {
        let mut next = below(0x9E37_79B9_7F4A_7C15u64);
        for round in 0..3000 {
            let ps = [1u32, 2, 16, 64, 3][round % 5];
            let layout = Layout {
                size: 4096 * u64::from(ps),
                page_size: ps,
                num_pages: 4096,
            };
            let bs = 1 + next(40) as usize;
            let mut prefix: Vec<i64> = (0..bs).map(|_| next(2000) as i64).collect();
            let mut seq: Vec<i64> = prefix.iter().map(|&p| p + next(3000) as i64).collect();
            if round % 3 == 0 {
                // One invalid length somewhere (or two).
                for _ in 0..1 + next(2) {
                    let i = next(bs as u64) as usize;
                    match next(5) {
                        0 => prefix[i] = -1 - next(5) as i64,
                        1 => seq[i] = prefix[i] - 1 - next(5) as i64,
                        2 => seq[i] = layout.size as i64 + 1 + next(5) as i64,
                        3 => seq[i] = i64::MIN,
                        _ => prefix[i] = i64::MAX,
                    }
                }
            }
            let reference = (|| {
                let (mut tokens, mut pages) = (0u64, 0u64);
                for (i, (&p, &s)) in prefix.iter().zip(&seq).enumerate() {
                    let shape = extend_shape(&layout, i, p, s)?;
                    tokens += shape.tokens();
                    pages += shape.new_pages(u64::from(ps));
                }
                Ok::<_, PoolError>(ExtendPlan {
                    new_pages: pages,
                    tokens,
                })
            })();
            let plan = plan_extend_lengths(&layout, &prefix, &seq);
            match (&plan, &reference) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "round {round}"),
                (Err(a), Err(b)) => assert_eq!(a.message(), b.message(), "round {round}"),
                _ => panic!("round {round}: {plan:?} vs {reference:?}"),
            }
            let decode: Vec<i64> = seq.iter().map(|&s| s.saturating_add(1)).collect();
            let reference = (|| {
                let mut pages = 0u64;
                for (i, &s) in decode.iter().enumerate() {
                    if s < 1 || s as u64 > layout.size {
                        return Err(i);
                    }
                    pages += u64::from(decode_needs_page(s as u64, u64::from(ps)));
                }
                Ok(pages)
            })();
            match (plan_decode(&layout, &decode), reference) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "round {round}"),
                (Err(e), Err(i)) => assert!(
                    e.message().contains(&format!("seq_lens[{i}] =")),
                    "round {round}: {e}"
                ),
                (a, b) => panic!("round {round}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn every_compiled_copy_of_the_fast_pass_gives_the_same_sums() {
        // Batches of every length up to a few vectors (the remainders of each width), valid
        // or with one invalid length, through each copy this CPU runs against the generic one.
        let copies = batch_sums::Simd::available();
        let mut next = below(0x2545_F491_4F6C_DD1Du64);
        let size = 1u64 << 20;
        for round in 0..2000 {
            let n = round % 70;
            let shift = [0u32, 1, 4, 6][round % 4];
            let mut prefix: Vec<i64> = (0..n).map(|_| next(1 << 19) as i64).collect();
            let mut seq: Vec<i64> = prefix.iter().map(|&p| p + next(1 << 12) as i64).collect();
            if n > 0 && round % 3 == 0 {
                let i = next(n as u64) as usize;
                match next(4) {
                    0 => prefix[i] = -1,
                    1 => seq[i] = prefix[i] - 1,
                    2 => seq[i] = size as i64 + 1,
                    _ => seq[i] = 0,
                }
            }
            let want_extend = batch_sums::Simd::Generic.extend(&prefix, &seq, size, shift);
            let want_decode = batch_sums::Simd::Generic.decode(&seq, size, shift);
            // Each copy, and both ways of checking (running maximum or OR-ed top bits).
            for (form, got) in every_extend_pass(&prefix, &seq, size, shift) {
                assert_eq!(
                    (got.bad, got.tokens, got.pages),
                    (want_extend.bad, want_extend.tokens, want_extend.pages),
                    "extend, {form}, round {round}"
                );
            }
            for (form, got) in every_decode_pass(&seq, size, shift) {
                assert_eq!(
                    (got.bad, got.tokens, got.pages),
                    (want_decode.bad, want_decode.tokens, want_decode.pages),
                    "decode, {form}, round {round}"
                );
            }
        }
        println!("fast-pass copies compared: {copies:?}");
    }

    /// Every form of the fast pass: both ways of checking (a running maximum, or top bits
    /// and compares OR-ed into a word), compiled for the baseline target so both run on any
    /// CPU, then each copy this CPU runs (which picks one way each), then the dispatch.
    fn every_extend_pass(
        prefix: &[i64],
        seq: &[i64],
        size: u64,
        shift: u32,
    ) -> Vec<(String, batch_sums::Sums)> {
        let mut all = vec![
            (
                "max".to_string(),
                batch_sums::extend_generic::<true>(prefix, seq, size, shift),
            ),
            (
                "or".to_string(),
                batch_sums::extend_generic::<false>(prefix, seq, size, shift),
            ),
            (
                "best".to_string(),
                batch_sums::extend(prefix, seq, size, shift),
            ),
        ];
        for copy in batch_sums::Simd::available() {
            all.push((format!("{copy:?}"), copy.extend(prefix, seq, size, shift)));
        }
        all
    }

    /// [`every_extend_pass`] for decodes.
    fn every_decode_pass(seq: &[i64], size: u64, shift: u32) -> Vec<(String, batch_sums::Sums)> {
        let mut all = vec![
            (
                "max".to_string(),
                batch_sums::decode_generic::<true>(seq, size, shift),
            ),
            (
                "or".to_string(),
                batch_sums::decode_generic::<false>(seq, size, shift),
            ),
            ("best".to_string(), batch_sums::decode(seq, size, shift)),
        ];
        for copy in batch_sums::Simd::available() {
            all.push((format!("{copy:?}"), copy.decode(seq, size, shift)));
        }
        all
    }

    #[test]
    fn the_fast_pass_decides_validity_at_every_boundary() {
        // The fast pass folds the checks into unsigned comparisons, a running maximum and top
        // bits: every pair of lengths around 0, 1, the page size, the pool size, the pool
        // size + 2^63 (as u64: where `size - s` turns non-negative again) and the extremes
        // must be judged as request by request (and, when valid, summed alike), by every
        // form of the pass, alone and at several places of a batch long enough for the
        // vector loops (a 32-request unrolled loop, a vector remainder, a scalar tail), for
        // small pools and pools just under 2^63 slots.
        let top = i64::MAX as u64; // 2^63 - 1
        for (size, ps) in [
            (1024u64, 16u32),
            (1, 1),
            (64, 64),
            (4096, 1),
            (top - 15, 16),
            (top, 1),
            (top + 1 - (1 << 31), 1 << 31),
        ] {
            let shift = ps.trailing_zeros();
            let layout = Layout {
                size,
                page_size: ps,
                num_pages: 1,
            };
            let mut edges = Vec::new();
            for base in [
                0,
                1,
                u64::from(ps),
                size,
                size.wrapping_add(1 << 63),
                top,
                1 << 63,
            ] {
                for d in -2i64..=2 {
                    edges.push(base.wrapping_add_signed(d) as i64);
                }
            }
            edges.sort_unstable();
            edges.dedup();
            // Valid requests around the one under test.
            let n = 37;
            let filler = |i: usize| {
                let p = (i as u64 * 7) % (size + 1);
                (p as i64, (p + i as u64).min(size) as i64)
            };
            let mut prefix: Vec<i64> = (0..n).map(|i| filler(i).0).collect();
            let mut seq: Vec<i64> = (0..n).map(|i| filler(i).1).collect();
            for &p in &edges {
                for &s in &edges {
                    let want = extend_shape(&layout, 0, p, s).ok();
                    for at in [None, Some(0), Some(13), Some(31), Some(36)] {
                        let (pre, sq) = match at {
                            None => (&[p][..], &[s][..]),
                            Some(i) => {
                                prefix[i] = p;
                                seq[i] = s;
                                (&prefix[..], &seq[..])
                            }
                        };
                        let reference = want.map(|_| {
                            let (mut tokens, mut pages) = (0u64, 0u64);
                            for (&p, &s) in pre.iter().zip(sq) {
                                let shape = ExtendShape {
                                    prefix: p as u64,
                                    seq: s as u64,
                                };
                                tokens += shape.tokens();
                                pages += shape.new_pages(u64::from(ps));
                            }
                            (tokens, pages)
                        });
                        for (form, got) in every_extend_pass(pre, sq, size, shift) {
                            let what = format!(
                                "extend {form}, size {size}, ps {ps}, prefix {p} seq {s} at {at:?}"
                            );
                            assert_eq!(got.bad, reference.is_none(), "{what}");
                            if let Some(sums) = reference {
                                assert_eq!((got.tokens, got.pages), sums, "{what}");
                            }
                        }
                        if let Some(i) = at {
                            (prefix[i], seq[i]) = filler(i);
                        }
                    }
                }
                let s = p;
                let valid = s >= 1 && s as u64 <= size;
                for at in [None, Some(0), Some(13), Some(31), Some(36)] {
                    let mut batch: Vec<i64> = (0..n).map(|i| filler(i).1.max(1)).collect();
                    let batch = match at {
                        None => vec![s],
                        Some(i) => {
                            batch[i] = s;
                            batch
                        }
                    };
                    let pages = valid.then(|| {
                        batch
                            .iter()
                            .filter(|&&s| decode_needs_page(s as u64, u64::from(ps)))
                            .count() as u64
                    });
                    for (form, got) in every_decode_pass(&batch, size, shift) {
                        let what =
                            format!("decode {form}, size {size}, ps {ps}, seq {s} at {at:?}");
                        assert_eq!(got.bad, !valid, "{what}");
                        if let Some(pages) = pages {
                            assert_eq!(
                                (got.tokens, got.pages),
                                (batch.len() as u64, pages),
                                "{what}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_pool_of_2_pow_63_slots_plans_request_by_request() {
        // The fast pass's identities need size < 2^63: at 2^63 or more every form declines
        // every batch, and the request-by-request path gives the sums.
        for size in [1 << 63, (1 << 63) + 5, u64::MAX] {
            for (form, got) in every_extend_pass(&[0, 3], &[5, 9], size, 31) {
                assert!(got.bad, "extend {form}, size {size}");
            }
            for (form, got) in every_decode_pass(&[5, 9], size, 31) {
                assert!(got.bad, "decode {form}, size {size}");
            }
        }
        let layout = Layout {
            size: 1 << 63,
            page_size: 1 << 31,
            num_pages: u32::MAX,
        };
        let plan = plan_extend_lengths(&layout, &[0, 3], &[5, i64::MAX]).unwrap();
        assert_eq!(plan.tokens, 5 + (i64::MAX as u64 - 3));
        assert_eq!(
            plan.new_pages,
            1 + ((i64::MAX as u64).div_ceil(1 << 31) - 1)
        );
        // A negative length reads as at least 2^63 as u64, within such a pool: only the
        // request-by-request path names it.
        assert!(plan_extend_lengths(&layout, &[0, 3], &[5, i64::MIN]).is_err());
        assert!(plan_decode(&layout, &[5, i64::MIN]).is_err());
        assert_eq!(plan_decode(&layout, &[1, 5, i64::MAX]).unwrap(), 1);
    }

    #[test]
    fn decode_needs_page_at_boundaries() {
        assert!(decode_needs_page(1, 16));
        assert!(!decode_needs_page(16, 16));
        assert!(decode_needs_page(17, 16));
        assert!(decode_needs_page(5, 1));
    }

    #[test]
    fn lengths_are_validated_with_the_offending_element() {
        let layout = Layout {
            size: 64,
            page_size: 4,
            num_pages: 16,
        };
        let err = plan_extend(&layout, &[0, 5], &[3, 4], 2).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidLengths);
        assert!(
            err.message().contains("seq_lens[1] = 4"),
            "{}",
            err.message()
        );
        let err = plan_extend(&layout, &[0, -1], &[3, 4], 8).unwrap_err();
        assert!(err.message().contains("prefix_lens[1] = -1"));
        let err = plan_extend(&layout, &[0, 1], &[3, 4], 7).unwrap_err();
        assert!(err.message().contains("extend_num_tokens is 7"));
        let err = plan_extend(&layout, &[0], &[65], 65).unwrap_err();
        assert!(err.message().contains("exceeds the pool size"));
        assert_eq!(
            plan_extend(&layout, &[0, 2], &[3, 11], 12).unwrap(),
            ExtendPlan {
                new_pages: 3,
                tokens: 12
            }
        );
        assert_eq!(plan_decode(&layout, &[1, 2, 5, 8]).unwrap(), 2);
        assert_eq!(
            plan_decode(&layout, &[3, 0]).unwrap_err().kind(),
            ErrorKind::InvalidLengths
        );
    }
}
