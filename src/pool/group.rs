//! Free groups: frees issued between `free_group_begin` and `free_group_end` are validated
//! at once but return to the pool together when the group ends.

/// Pages freed inside an open group, in the two queues SGLang keeps.
#[derive(Clone, Debug, Default)]
pub(crate) struct FreeGroup {
    /// Paged pools: pages from `free(indices)`; released first, as one ascending block
    /// (SGLang frees the concatenated indices with one `unique`).
    pub by_index: Vec<u32>,
    /// Pages from `free_pages`/`free_segment` (and every free of a token pool), released
    /// afterwards in call order.
    pub in_order: Vec<u32>,
}
