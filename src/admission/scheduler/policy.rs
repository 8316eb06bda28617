//! Ordering of the waiting queue (SGLang's `SchedulePolicy.calc_priority`).

use std::collections::HashMap;

use super::request::{Registry, Request};

/// How the waiting queue is ordered before each prefill pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// First come, first served (the default).
    #[default]
    Fcfs,
    /// Longest output (`max_new_tokens`) first.
    Lof,
    /// Random, from the caller's seed: reproducible run to run and rank to rank.
    Random {
        /// Seed of the shuffle.
        seed: u64,
    },
    /// Longest cached prefix first (falls back to FCFS above 128 waiting requests). As in
    /// SGLang, priorities do not order it (nor its fallback: arrival order).
    Lpm,
    /// DFS over the prefix tree, heavier subtrees first (uses `RequestSpec::prefix_path`).
    DfsWeight,
}

/// Priority scheduling (SGLang `--enable-priority-scheduling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorityConfig {
    /// Lower values run first (SGLang `schedule_low_priority_values_first`).
    pub low_values_first: bool,
    /// Preempt running requests whose priority is worse by more than `threshold`
    /// (`None` disables preemption; SGLang's default threshold is 10).
    pub preemption_threshold: Option<i64>,
}

impl PriorityConfig {
    /// Sort key: smaller runs first. Widened to 128 bits: the caller's priority may be
    /// `INT64_MIN`, whose negation, or a difference of two ranks, does not fit an `i64`.
    pub(crate) fn rank(&self, priority: i64) -> i128 {
        let priority = i128::from(priority);
        if self.low_values_first {
            priority
        } else {
            -priority
        }
    }
}

/// Waiting requests above which LPM stops sorting (`WAITING_QUEUE_PREFIX_MATCH_MAX`).
const LPM_MAX_QUEUE: usize = 128;

/// splitmix64, for the seeded random policy.
pub(crate) struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Orders `queue` (request ids) in place. `pass` varies the random shuffle from one pass to
/// the next.
pub(crate) fn order(
    policy: Policy,
    priority: Option<PriorityConfig>,
    queue: &mut [u32],
    reqs: &Registry,
    pass: u64,
) {
    let prio = |r: &Request| priority.map_or(0, |p| p.rank(r.spec.priority));
    // Each key is computed once per request (`sort_by_cached_key`): one map lookup each,
    // not two per comparison.
    let by = |queue: &mut [u32], key: &dyn Fn(&Request) -> (i128, i64, u64)| {
        queue.sort_by_cached_key(|&slot| key(&reqs[slot]));
    };
    match policy {
        Policy::Fcfs => by(queue, &|r| (prio(r), 0, r.arrival)),
        Policy::Lof => by(queue, &|r| {
            (
                prio(r),
                -(r.spec.max_new_tokens.min(i64::MAX as u64) as i64),
                r.arrival,
            )
        }),
        Policy::Random { seed } => {
            by(queue, &|r| (0, 0, r.arrival));
            let mut rng = SplitMix(seed ^ pass.wrapping_mul(0xA24B_AED4_963E_E407));
            for k in (1..queue.len()).rev() {
                let j = (rng.next() % (k as u64 + 1)) as usize;
                queue.swap(k, j);
            }
        }
        // SGLang's LPM sorts by the match alone, priority scheduling or not, and above 128
        // waiting requests leaves the queue as it stands (its FCFS fallback is no sort):
        // here, arrival order.
        Policy::Lpm if queue.len() > LPM_MAX_QUEUE => by(queue, &|r| (0, 0, r.arrival)),
        Policy::Lpm => by(queue, &|r| {
            (
                0,
                -(r.spec.prefix_len.min(i64::MAX as u64) as i64),
                r.arrival,
            )
        }),
        Policy::DfsWeight => {
            by(queue, &|r| (0, 0, r.arrival));
            dfs_weight(queue, reqs);
        }
    }
}

/// SGLang's `_sort_by_dfs_weight`: a node's weight is the number of waiting requests ending
/// there plus its children's weights; a DFS from the root visits heavier children first
/// (ties: first seen first) and emits each node's own requests after its subtree.
fn dfs_weight(queue: &mut [u32], reqs: &Registry) {
    const ROOT: u64 = u64::MAX;
    let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut own: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut weight: HashMap<u64, u64> = HashMap::new();
    for &i in queue.iter() {
        let path = &reqs[i].spec.prefix_path;
        let mut parent = ROOT;
        for &node in path {
            let kids = children.entry(parent).or_default();
            if !kids.contains(&node) {
                kids.push(node);
            }
            *weight.entry(node).or_default() += 1;
            parent = node;
        }
        own.entry(parent).or_default().push(i);
    }
    let mut out = Vec::with_capacity(queue.len());
    let mut stack = vec![(ROOT, false)];
    // Paths come from the engine and may disagree (a stale path after a node split, a
    // repeated node): visit every node once, so the walk ends and emits each request once.
    let mut visited = std::collections::HashSet::new();
    while let Some((node, expanded)) = stack.pop() {
        if expanded {
            out.extend(own.get(&node).into_iter().flatten().copied());
            continue;
        }
        if !visited.insert(node) {
            continue;
        }
        stack.push((node, true));
        if let Some(kids) = children.get(&node) {
            let mut kids = kids.clone();
            // Stable: among equal weights the first seen is visited first.
            kids.sort_by_key(|k| std::cmp::Reverse(weight[k]));
            for &kid in kids.iter().rev().filter(|k| !visited.contains(*k)) {
                stack.push((kid, false));
            }
        }
    }
    queue.copy_from_slice(&out);
}
