//! Pool configuration and the derived layout (pages, KV rows, largest slot).

use super::error::{fail, ErrorKind, PoolError};

/// Width of the slot indices a pool reads and writes through the C ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IndexType {
    /// `int64_t` indices (SGLang's `out_cache_loc`); the default.
    #[default]
    I64,
    /// `int32_t` token slot indices (the same slots, 32 bits wide, for int32 tables such as
    /// SGLang's `req_to_token`; never page ids).
    I32,
}

/// Where a pool's free list and page-state map live and where its index math runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// Host memory; every operation runs on the calling thread.
    #[default]
    Host,
    /// Device memory of CUDA device `ordinal` (not yet available in this build).
    Cuda {
        /// CUDA device ordinal.
        ordinal: i32,
    },
}

/// How to build a pool. `size` and `page_size` follow SGLang: `size` usable token slots
/// (`max_total_num_tokens`), split into `size / page_size` pages, plus the reserved page 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Usable token slots; a positive multiple of `page_size`.
    pub size: u64,
    /// Tokens per page; 1 makes a token pool (FIFO reuse), more a paged pool (LIFO reuse).
    pub page_size: u32,
    /// Stage frees and merge them sorted only when an allocation runs short (SGLang's
    /// PD-disaggregation mode, for physically contiguous page runs).
    pub need_sort: bool,
    /// Index width at the C ABI.
    pub index_type: IndexType,
    /// Where the pool lives.
    pub backend: BackendKind,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            size: 0,
            page_size: 1,
            need_sort: false,
            index_type: IndexType::I64,
            backend: BackendKind::Host,
        }
    }
}

/// Largest page count a pool may have: page ids are stored as `u32`.
const MAX_PAGES: u64 = u32::MAX as u64 - 1;

/// The validated shape of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub size: u64,
    pub page_size: u32,
    pub num_pages: u32,
}

impl Layout {
    pub fn new(config: &PoolConfig) -> Result<Self, PoolError> {
        let ps = u64::from(config.page_size);
        if ps == 0 {
            return fail(ErrorKind::InvalidArgument, "page_size must be at least 1");
        }
        if config.size == 0 {
            return fail(ErrorKind::InvalidArgument, "size must be at least one page");
        }
        if !config.size.is_multiple_of(ps) {
            return fail(
                ErrorKind::Unaligned,
                format!(
                    "size {} is not a multiple of page_size {}",
                    config.size, config.page_size
                ),
            );
        }
        let num_pages = config.size / ps;
        if num_pages > MAX_PAGES {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "size {} gives {num_pages} pages; at most {MAX_PAGES} are supported",
                    config.size
                ),
            );
        }
        let layout = Self {
            size: config.size,
            page_size: config.page_size,
            num_pages: num_pages as u32,
        };
        let limit = match config.index_type {
            IndexType::I64 => i64::MAX as u64,
            IndexType::I32 => i32::MAX as u64,
        };
        if layout.max_slot() > limit {
            return fail(
                ErrorKind::InvalidArgument,
                format!(
                    "largest slot {} does not fit the configured index type {:?}",
                    layout.max_slot(),
                    config.index_type
                ),
            );
        }
        Ok(layout)
    }

    /// Rows the engine's KV buffers need: the usable slots plus the reserved page 0.
    pub fn kv_rows(&self) -> u64 {
        self.size + u64::from(self.page_size)
    }

    /// The largest slot index the pool can hand out.
    pub fn max_slot(&self) -> u64 {
        self.kv_rows() - 1
    }

    pub fn is_paged(&self) -> bool {
        self.page_size > 1
    }
}
