//! The host pool the integration tests of the Rust API make (`mod host_pool;`): int64
//! indices, the given size, page size and `need_sort`.

use kvpool::{BackendKind, IndexType, Pool, PoolConfig};

pub fn pool(size: u64, ps: u32, need_sort: bool) -> Pool {
    Pool::new(PoolConfig {
        size,
        page_size: ps,
        need_sort,
        index_type: IndexType::I64,
        backend: BackendKind::Host,
    })
    .unwrap()
}
