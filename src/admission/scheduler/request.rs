//! Request descriptors the engine submits, and the scheduler's view of each request.

/// A request as the engine submits it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RequestSpec {
    /// The engine's id; unique among live requests.
    pub id: u64,
    /// Prompt tokens.
    pub input_len: u64,
    /// Tokens of the prompt already in the engine's prefix cache (page-aligned on a paged
    /// cache); refresh with `Scheduler::update_prefix` as the cache changes.
    pub prefix_len: u64,
    /// Of those, tokens that are evictable now (they stop being room once the request is
    /// admitted and locks them).
    pub prefix_evictable: u64,
    /// The request's `max_new_tokens`.
    pub max_new_tokens: u64,
    /// Tokens generated so far (0 for a new request).
    pub output_len: u64,
    /// Generates all `max_new_tokens` regardless of EOS.
    pub ignore_eos: bool,
    /// Priority (meaning of larger values set by `PriorityConfig::low_values_first`).
    pub priority: i64,
    /// Prefix-cache node ids from the root to the request's last matched node, for the
    /// DFS-weight policy (may be empty).
    pub prefix_path: Vec<u64>,
}

/// Where a request is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// In the waiting queue.
    Waiting,
    /// Prefilled chunk by chunk; `done` tokens of its fill are in the KV cache.
    Chunking,
    /// Decoding.
    Running,
}

/// The scheduler's record of one live request.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub spec: RequestSpec,
    /// Submission order: the FCFS key and every tie-breaker.
    pub arrival: u64,
    pub phase: Phase,
    /// Tokens in the KV cache (prompt, plus outputs whose KV is written).
    pub kv_len: u64,
    /// Tokens the current prefill must fill the KV cache up to (prompt + output so far).
    pub fill_len: u64,
    /// Times retracted.
    pub retractions: u32,
}

impl Request {
    pub fn new(spec: RequestSpec, arrival: u64) -> Self {
        let fill_len = spec.input_len + spec.output_len;
        Self {
            spec,
            arrival,
            phase: Phase::Waiting,
            kv_len: 0,
            fill_len,
            retractions: 0,
        }
    }

    /// Back to the queue after a retraction: its KV is gone, it re-prefills prompt and
    /// output so far.
    pub fn retract(&mut self) {
        self.phase = Phase::Waiting;
        self.kv_len = 0;
        self.fill_len = self.spec.input_len + self.spec.output_len;
        self.spec.prefix_len = 0;
        self.spec.prefix_evictable = 0;
        self.retractions += 1;
    }
}

/// Where live requests are stored: a dense slab (the step walks it in queue order without
/// hashing) plus an id index for the engine's calls.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    slots: Vec<Option<Request>>,
    by_id: std::collections::HashMap<u64, u32>,
    vacant: Vec<u32>,
}

impl Registry {
    /// The slot of live request `id`.
    pub fn slot(&self, id: u64) -> Option<u32> {
        self.by_id.get(&id).copied()
    }

    /// Stores a new request (its id must not be live) and returns its slot.
    pub fn insert(&mut self, req: Request) -> u32 {
        let id = req.spec.id;
        let slot = match self.vacant.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(req);
                slot
            }
            None => {
                self.slots.push(Some(req));
                (self.slots.len() - 1) as u32
            }
        };
        self.by_id.insert(id, slot);
        slot
    }

    /// Removes the request in `slot`.
    pub fn remove(&mut self, slot: u32) -> Request {
        let req = self.slots[slot as usize].take().expect("live slot");
        self.by_id.remove(&req.spec.id);
        self.vacant.push(slot);
        req
    }

    /// The request in `slot`, if the slot is live.
    pub fn get(&self, slot: u32) -> Option<&Request> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// Whether no request is live.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

impl std::ops::Index<u32> for Registry {
    type Output = Request;
    fn index(&self, slot: u32) -> &Request {
        self.slots[slot as usize].as_ref().expect("live slot")
    }
}

impl std::ops::IndexMut<u32> for Registry {
    fn index_mut(&mut self, slot: u32) -> &mut Request {
        self.slots[slot as usize].as_mut().expect("live slot")
    }
}
