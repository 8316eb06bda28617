//! The pool's freed-slot counter through the C ABI: frees return whole pages, so
//! `slots_freed` is `pages_freed * page_size` and, on a paged pool, exceeds the slots a
//! partly used page handed out; the header says so next to the field.

use kvpool::ffi::*;

fn stats(pool: *mut kvp_pool) -> kvp_pool_stats {
    let mut s = kvp_pool_stats::default();
    // SAFETY: pool is live, s writable.
    assert_eq!(unsafe { kvp_pool_get_stats(pool, &mut s) }, kvp_status::Ok);
    s
}

/// Allocates a `tokens`-token request with `alloc_extend`, frees it, returns the counters.
fn allocate_and_free(page_size: u32, tokens: i64) -> kvp_pool_stats {
    let config = kvp_pool_config {
        size: 64 * u64::from(page_size),
        page_size,
        ..kvp_pool_config_default()
    };
    let mut pool = std::ptr::null_mut();
    let mut row = vec![0i64; tokens as usize];
    // SAFETY: valid config, out-parameters and buffers of the stated lengths.
    unsafe {
        assert_eq!(kvp_pool_new(&config, &mut pool), kvp_status::Ok);
        let status = kvp_pool_alloc_extend(
            pool,
            [0i64].as_ptr(),
            [tokens].as_ptr(),
            [-1i64].as_ptr().cast(),
            1,
            tokens as usize,
            row.as_mut_ptr().cast(),
            row.len(),
        );
        assert_eq!(status, kvp_status::Ok);
        let status = kvp_pool_free_indices(pool, row.as_ptr().cast(), row.len());
        assert_eq!(status, kvp_status::Ok);
    }
    let s = stats(pool);
    // SAFETY: pool is live and not used afterwards.
    unsafe { kvp_pool_free(pool) };
    s
}

#[test]
fn slots_freed_counts_whole_pages_on_a_paged_pool() {
    // 21 tokens on 16-token pages: one full page and one with 5 of 16 slots used.
    let s = allocate_and_free(16, 21);
    assert_eq!((s.tokens_allocated, s.pages_allocated), (21, 2));
    assert_eq!(s.pages_freed, 2);
    assert_eq!(s.slots_freed, s.pages_freed * 16);
    assert_eq!(s.slots_freed, 32);
    assert!(s.slots_freed > s.tokens_allocated);
    assert_eq!(s.pages_in_use, 0);
    assert_eq!(s.pages_allocated - s.pages_freed, s.pages_in_use);
}

#[test]
fn slots_freed_equals_tokens_on_a_token_pool() {
    let s = allocate_and_free(1, 21);
    assert_eq!(
        (s.tokens_allocated, s.pages_freed, s.slots_freed),
        (21, 21, 21)
    );
}

#[test]
fn the_header_documents_what_slots_freed_counts() {
    let header = include_str!("../include/kvpool.h");
    let field = header
        .find("uint64_t slots_freed;")
        .expect("kvp_pool_stats.slots_freed in include/kvpool.h");
    let doc = &header[header[..field].rfind("/**").unwrap()..field];
    assert!(doc.contains("`pages_freed * page_size`"), "{doc}");
    assert!(doc.contains("exceeds `tokens_allocated`"), "{doc}");
    assert!(!header.contains("tokens_freed"));
}
