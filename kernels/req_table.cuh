// Request-to-token tables (SGLang's req_to_token, the engine's own int32 or int64 tensor):
// the table's description, element access and the error codes of calls by row. Shared by
// the fused one-block allocation kernels (extend_block.cuh) and the rows kernels (rows.cuh).

namespace kvp {

// Kernel error codes of rows calls (src/cuda/layout.rs decodes them).
enum RowsErr : uint32_t {
  ERR_ROW = 18,        // rows[i] outside the table
  ERR_ROW_TWICE = 19,  // rows[i] repeats an earlier request's row
  ERR_ROW_LEN = 20,    // seq_lens[i] (or a segment's end) past the table's row_len
};

// A table borrowed for one call, and the batch's rows in it (device int64).
struct TableArgs {
  void *table;
  uint32_t wide;  // int64 entries (else int32)
  unsigned long long rows_in_table, stride, row_len;
  const long long *rows;
};

__device__ inline long long table_at(const void *table, uint32_t wide, unsigned long long at) {
  return wide ? ((const long long *)table)[at] : (long long)((const int *)table)[at];
}

__device__ inline void table_put(void *table, uint32_t wide, unsigned long long at, long long v) {
  if (wide) ((long long *)table)[at] = v;
  else ((int *)table)[at] = (int)v;
}

// A table entry (a last_loc, or a slot to free) as the pool's index type sees it: an entry
// an int32 pool cannot hold is outside the pool, so -2 keeps it so (the checks then refuse
// it, as the host backend does; narrowed as it is, it could name a slot in use).
template <typename Index>
__device__ inline long long table_entry(long long entry) {
  if (sizeof(Index) == 4 && (entry > 0x7fffffffll || entry < -1)) return -2;
  return entry;
}

}  // namespace kvp
