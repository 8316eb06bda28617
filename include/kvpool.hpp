// kvpool.hpp — header-only C++17 wrappers over kvpool's C ABI (include/kvpool.h).
//
//  - Handles. kvpool::pool, snapshot, scheduler, adder and delayer each own one C handle
//    (std::unique_ptr with the matching kvp_*_free): move-only, freed exactly once.
//    get() lends the C handle, release() gives it up, X::adopt(raw) takes one over
//    (decode_reservation::adopt(raw, index_type): its steps check out's element type).
//    A moved-from object holds NULL; calling it throws (KVP_STATUS_NULL_ARGUMENT); only its
//    cached accessors (page_size(), index_type(), ...) still answer, with the old values.
//  - Errors. A status other than KVP_STATUS_OK becomes a kvpool::error carrying the status
//    and the thread's kvp_last_error_message(); what() reads "<call>: <status text>: <message>".
//    As in C, a failing call changes nothing.
//  - Buffers. Every buffer parameter takes any contiguous container with data() and size()
//    (std::vector, std::array, kvpool::span, std::span, ...); kvpool::span is a plain
//    pointer + element count. Index buffers are templated on their element type (int64_t or
//    int32_t) and checked at run time against the pool's index type
//    (KVP_STATUS_INVALID_ARGUMENT, before the C call); length arrays are int64_t.
//  - Threads. As in C: calls on one handle are serialized by its internal lock, so a
//    const or non-const method may run on several threads at once; destroying, moving or
//    assigning a wrapper must not race with other use of it.
//  - Backends. A host pool (pool::create) is driven by the host methods above; a device pool
//    (pool::create_cuda, on CUDA device N's primary context) by the *_async methods, which
//    take device buffers (kvpool::device_span: a device pointer and an element count, built
//    explicitly so a host container cannot be passed by mistake), host copies of the lengths
//    (read during the call only) and a kvpool::stream_t (cudaStream_t / CUstream; nullptr is
//    the legacy default stream). They enqueue kernels and return without synchronizing:
//    device buffers must stay allocated (inputs unchanged, outputs unread) until the stream
//    passes the call, and all calls on one pool must be ordered on the device (one stream, or
//    streams ordered with events). Invalid indices are found on the device and reported
//    later, by check_device() and every later call (KVP_STATUS_DEVICE_FAULT), until
//    clear_async() or restore_state_async(). A host call on a device pool, or an _async call
//    on a host pool, throws KVP_STATUS_WRONG_BACKEND. This header includes no CUDA header.
//  - Destruction of a device pool (and of its snapshots) never waits for the GPU and is safe
//    while its calls are still queued, also during exception unwinding: the destructor
//    returns at once and the library frees the pool's device memory after the last queued
//    call has run (stream-ordered release; see kvp_pool_free). Your own device buffers
//    passed to those calls must still outlive them. pool::set_debug(KVP_DEBUG_STREAM_ORDER)
//    checks on the device that calls from several streams are ordered
//    (KVP_STATUS_UNORDERED_STREAMS otherwise).
//
// Every constructor checks that the loaded library has this header's ABI version.
#ifndef KVPOOL_HPP
#define KVPOOL_HPP

#if __cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L)
#error "kvpool.hpp needs C++17 (kvpool.h alone works from C99 and C++11)"
#else

#include "kvpool.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// The CUDA runtime's cudaStream_t and the driver's CUstream are both `CUstream_st *`.
struct CUstream_st;

namespace kvpool {

/// A CUDA stream (cudaStream_t, CUstream; nullptr: the legacy default stream).
using stream_t = CUstream_st *;

// ---- errors ------------------------------------------------------------------------------

/// A kvpool call failed: status() is its kvp_status, message() the library's description
/// of what was wrong (kvp_last_error_message right after the call).
class error : public std::runtime_error {
public:
    error(kvp_status status, const std::string &call, std::string message)
        : std::runtime_error(call + ": " + kvp_status_str(static_cast<int32_t>(status)) +
                             ": " + message),
          status_(status),
          message_(std::move(message)) {}

    kvp_status status() const noexcept { return status_; }
    const std::string &message() const noexcept { return message_; }

private:
    kvp_status status_;
    std::string message_;
};

/// This thread's last error message (meaningful right after a failing call).
inline std::string last_error_message() {
    std::string text(kvp_last_error_message(nullptr, 0), '\0');
    kvp_last_error_message(text.data(), text.size() + 1);  // writes the NUL too
    return text;
}

/// Throws kvpool::error unless `status` is KVP_STATUS_OK; call it right after the C call,
/// on the same thread. Usable on any kvp_* status, also from code that calls kvpool.h.
inline void check(kvp_status status, const char *call) {
    if (status != KVP_STATUS_OK) throw error(status, call, last_error_message());
}

/// The library's version ("0.1.0") and ABI version (KVP_ABI_VERSION when they match).
inline std::string version() { return kvp_version(); }
inline uint32_t abi_version() noexcept { return kvp_abi_version(); }

/// Throws kvpool::error (KVP_STATUS_UNSUPPORTED) if the loaded library's ABI version is not
/// this header's.
inline void check_abi_version() {
    if (kvp_abi_version() != KVP_ABI_VERSION) {
        throw error(KVP_STATUS_UNSUPPORTED, "kvp_abi_version",
                    "header ABI " + std::to_string(KVP_ABI_VERSION) + ", library ABI " +
                        std::to_string(kvp_abi_version()) + ": rebuild against the library");
    }
}

/// Released device pools (or snapshot buffers) whose memory still waits for kernels that
/// were queued when they were released (kvp_device_pending_releases; tests, leak checks).
inline std::size_t device_pending_releases() {
    std::size_t out = 0;
    check(kvp_device_pending_releases(&out), "kvp_device_pending_releases");
    return out;
}

// ---- buffers -----------------------------------------------------------------------------

template <class T>
class device_span;

namespace detail {

template <class C>
struct is_device_span : std::false_type {};
template <class T>
struct is_device_span<device_span<T>> : std::true_type {};
template <class C>
constexpr bool is_device_span_v = is_device_span<std::remove_cv_t<std::remove_reference_t<C>>>::value;

}  // namespace detail

/// A pointer and an element count (std::span's subset that kvpool needs). Converts from any
/// contiguous container with data() and size() of a compatible element type — host memory,
/// so never from a kvpool::device_span.
template <class T>
class span {
public:
    constexpr span() noexcept = default;
    constexpr span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    template <class C, class = std::enable_if_t<
                           !detail::is_device_span_v<C> &&
                           std::is_convertible_v<
                               std::remove_pointer_t<decltype(std::data(std::declval<C &>()))> (*)[],
                               T (*)[]>>>
    constexpr span(C &&container) noexcept  // NOLINT(google-explicit-constructor)
        : data_(std::data(container)), size_(std::size(container)) {}

    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }
    constexpr T &operator[](std::size_t i) const noexcept { return data_[i]; }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

/// A buffer in device memory (cudaMalloc, a CUDA tensor's data_ptr(), ...): a pointer and an
/// element count, never dereferenced on the host. Only built explicitly (or with
/// kvpool::device(ptr, n)), so a host container is never taken for a device buffer.
template <class T>
class device_span {
public:
    constexpr device_span() noexcept = default;
    constexpr device_span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    /// device_span<const T> from device_span<T>.
    template <class U, class = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
    constexpr device_span(device_span<U> other) noexcept  // NOLINT(google-explicit-constructor)
        : data_(other.data()), size_(other.size()) {}

    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    /// Elements [offset, offset + count) (pointer arithmetic only).
    constexpr device_span subspan(std::size_t offset, std::size_t count) const noexcept {
        return device_span(data_ + offset, count);
    }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

/// device_span<T> of `size` elements at device pointer `data`.
template <class T>
constexpr device_span<T> device(T *data, std::size_t size) noexcept {
    return device_span<T>(data, size);
}

namespace detail {

// The element type of a host buffer (a host-pool index buffer, a length array, a host copy).
template <class C>
struct host_element {
    static_assert(!is_device_span_v<C>,
                  "a kvpool::device_span is device memory: this parameter takes a host container");
    using type = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(std::declval<C &>()))>>;
};
template <class C>
using element_t = typename host_element<C>::type;

template <class I>
constexpr bool is_index_v = std::is_same_v<I, int64_t> || std::is_same_v<I, int32_t>;

template <class I>
constexpr kvp_index_type index_type_of() {
    static_assert(is_index_v<I>, "kvpool index buffers hold int64_t or int32_t");
    return std::is_same_v<I, int64_t> ? KVP_INDEX_TYPE_I64 : KVP_INDEX_TYPE_I32;
}

inline const char *index_type_name(uint32_t type) {
    return type == KVP_INDEX_TYPE_I32 ? "int32_t" : "int64_t";
}

template <class C>
void require_lengths(const C &) {
    static_assert(std::is_same_v<element_t<C>, int64_t>,
                  "length arrays (prefix_lens, seq_lens) hold int64_t");
}

// sum(seq_lens[i] - prefix_lens[i]) over the entries with 0 <= prefix_lens[i] <= seq_lens[i]
// (the library refuses the others), saturating instead of overflowing.
template <class PrefixLens, class SeqLens>
std::size_t extend_total(const PrefixLens &prefix_lens, const SeqLens &seq_lens) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < std::size(seq_lens) && i < std::size(prefix_lens); ++i) {
        const int64_t prefix = std::data(prefix_lens)[i], seq = std::data(seq_lens)[i];
        if (prefix < 0 || seq < prefix) continue;
        const auto tokens = static_cast<std::size_t>(seq - prefix);
        total = tokens > std::numeric_limits<std::size_t>::max() - total
                    ? std::numeric_limits<std::size_t>::max()
                    : total + tokens;
    }
    return total;
}

// `raw`, checked for X::adopt: not NULL, and from a library of this header's ABI.
template <class T>
T *adoptable(T *raw, const char *call) {
    if (raw == nullptr) throw error(KVP_STATUS_NULL_ARGUMENT, call, "NULL handle");
    check_abi_version();
    return raw;
}

// One deleter for every handle type: kvp_*_free accepts NULL.
struct deleter {
    void operator()(kvp_pool *p) const noexcept { kvp_pool_free(p); }
    void operator()(kvp_snapshot *p) const noexcept { kvp_snapshot_free(p); }
    void operator()(kvp_scheduler *p) const noexcept { kvp_scheduler_free(p); }
    void operator()(kvp_adder *p) const noexcept { kvp_adder_free(p); }
    void operator()(kvp_delayer *p) const noexcept { kvp_delayer_free(p); }
    void operator()(kvp_decode_reservation *p) const noexcept { kvp_decode_reservation_free(p); }
};

// The owned C handle of a wrapper: move-only, freed once.
template <class T>
class owner {
public:
    T *get() const noexcept { return ptr_.get(); }
    T *release() noexcept { return ptr_.release(); }
    explicit operator bool() const noexcept { return ptr_ != nullptr; }

protected:
    owner() = default;
    explicit owner(T *raw) noexcept : ptr_(raw) {}

private:
    std::unique_ptr<T, deleter> ptr_;
};

}  // namespace detail

// ---- request-to-token tables ---------------------------------------------------------------

/// A request-to-token table (SGLang's req_to_token) borrowed for one call: `rows` rows of
/// `row_len` usable entries, `row_stride` elements apart, of int32_t or int64_t (the table's
/// type is independent of the pool's index type). Host memory for host-pool methods, device
/// memory for the *_async ones. Nothing is registered or owned.
template <class T>
kvp_req_table req_table(T *data, uint64_t rows, uint64_t row_len, uint64_t row_stride = 0) {
    static_assert(detail::is_index_v<std::remove_cv_t<T>>, "req_to_token holds int32_t or int64_t");
    return kvp_req_table{const_cast<void *>(static_cast<const void *>(data)),
                         static_cast<uint32_t>(detail::index_type_of<std::remove_cv_t<T>>()),
                         rows, row_stride == 0 ? row_len : row_stride, row_len};
}

/// FlashInfer's paged-KV page table of a batch (pool::page_table): int32 kv_indptr
/// (batch + 1), kv_indices (kv_indptr[batch]), kv_last_page_len (batch).
struct page_table_t {
    std::vector<int32_t> kv_indptr;
    std::vector<int32_t> kv_indices;
    std::vector<int32_t> kv_last_page_len;
};

// ---- pool --------------------------------------------------------------------------------

/// A copy of a pool's allocator state (pool::backup_state), restorable any number of times.
class snapshot : public detail::owner<kvp_snapshot> {
public:
    /// Takes ownership of `raw` (from kvp_pool_backup_state); throws, without taking it, if
    /// it is NULL.
    static snapshot adopt(kvp_snapshot *raw) {
        return snapshot(detail::adoptable(raw, "kvpool::snapshot::adopt"));
    }

private:
    using owner::owner;
};

/// K reserved decode steps of a fixed batch (kvp_decode_reservation; pool::reserve_decode /
/// pool::reserve_decode_async). Each step() / step_async() hands out the next step's slots;
/// step_async() may be captured into a CUDA graph and the graph replayed once per step.
/// End it with pool::finish_reservation[_async]; until then its pages are held (freeing,
/// rewinding or continuing a request of the batch throws INVALID_STATE / faults the device
/// pool). Destructor: kvp_decode_reservation_free (an unfinished reservation returns nothing
/// to the pool; its holds end). Keeps its pool alive.
class decode_reservation : public detail::owner<kvp_decode_reservation> {
public:
    /// Takes ownership of `raw` (from kvp_pool_reserve_decode[_async] on a pool of index type
    /// `index_type`, which step() and step_async() check `out`'s element type against: the
    /// library writes the pool's index type, so a narrower `out` would be overrun).
    static decode_reservation adopt(kvp_decode_reservation *raw, kvp_index_type index_type) {
        decode_reservation res(detail::adoptable(raw, "kvpool::decode_reservation::adopt"));
        res.index_type_ = index_type;
        return res;
    }

    uint32_t steps() const { return info().steps; }
    std::size_t batch_size() const { return info().batch; }
    /// Pages the reservation took.
    uint64_t pages() const { return info().pages; }

    /// Host pool: the next step's slots into out[0 .. batch) (out's element type must be the
    /// pool's index type). Throws KVP_STATUS_INVALID_STATE past the reservation.
    template <class Out>
    void step(Out &&out) {
        require_index<detail::element_t<Out>>("kvp_decode_reservation_step");
        check(kvp_decode_reservation_step(get(), std::data(out), std::size(out), nullptr,
                                          nullptr),
              "kvp_decode_reservation_step");
    }
    /// Host pool: as above, also writing table[rows[i]][lens[i] + s] (host table and rows);
    /// `out` may be empty (passed as NULL: the table alone receives the slots).
    template <class Rows, class Out>
    void step(const kvp_req_table &table, const Rows &rows, Out &&out) {
        static_assert(std::is_same_v<detail::element_t<Rows>, int64_t>, "rows hold int64_t");
        require_index<detail::element_t<Out>>("kvp_decode_reservation_step");
        if (std::size(rows) != batch_size())
            throw error(KVP_STATUS_INVALID_LENGTHS, "kvp_decode_reservation_step",
                        "rows must have one entry per request of the reservation");
        check(kvp_decode_reservation_step(get(), std::size(out) ? std::data(out) : nullptr,
                                          std::size(out), &table, std::data(rows)),
              "kvp_decode_reservation_step");
    }

    /// Device pool: enqueues the next step (ONE kernel, capturable): slots into
    /// out[0 .. batch) (device). Past the reservation the kernel writes 0 and faults the pool.
    template <class Out>
    void step_async(device_span<Out> out, stream_t stream) {
        require_index<Out>("kvp_decode_reservation_step_async");
        require_out(out.size());
        check(kvp_decode_reservation_step_async(get(), out.data(), nullptr, nullptr, stream),
              "kvp_decode_reservation_step_async");
    }
    /// Device pool: as above, also writing table[rows[i]][lens[i] + s] (device table and
    /// rows); `out` may be an empty span (passed as NULL: the kernel takes no length, so a
    /// pointer would get batch_size() slots written whatever the span's size).
    template <class Out>
    void step_async(const kvp_req_table &table, device_span<const int64_t> rows,
                    device_span<Out> out, stream_t stream) {
        if (!out.empty()) {
            require_index<Out>("kvp_decode_reservation_step_async");
            require_out(out.size());
        }
        if (rows.size() != batch_size())
            throw error(KVP_STATUS_INVALID_LENGTHS, "kvp_decode_reservation_step_async",
                        "rows must have one entry per request of the reservation");
        check(kvp_decode_reservation_step_async(get(), out.empty() ? nullptr : out.data(), &table,
                                                rows.data(), stream),
              "kvp_decode_reservation_step_async");
    }

private:
    using owner::owner;

    kvp_index_type index_type_ = KVP_INDEX_TYPE_I64;

    template <class Index>
    void require_index(const char *call) const {
        if (!*this)  // moved-from or released: no index type to check against
            throw error(KVP_STATUS_NULL_ARGUMENT, call,
                        "reservation is NULL (a moved-from or released "
                        "kvpool::decode_reservation)");
        constexpr kvp_index_type type = detail::index_type_of<std::remove_const_t<Index>>();
        if (type != index_type_)
            throw error(KVP_STATUS_INVALID_ARGUMENT, call,
                        std::string("out holds ") + detail::index_type_name(type) +
                            " but the reservation's pool's index type is " +
                            detail::index_type_name(index_type_));
    }

    struct info_t {
        uint32_t steps = 0;
        std::size_t batch = 0;
        uint64_t pages = 0;
    };
    info_t info() const {
        info_t i;
        check(kvp_decode_reservation_get_info(get(), &i.steps, &i.batch, &i.pages),
              "kvp_decode_reservation_get_info");
        return i;
    }
    void require_out(std::size_t size) const {
        if (size < batch_size())
            throw error(KVP_STATUS_BUFFER_TOO_SMALL, "kvp_decode_reservation_step_async",
                        "out holds fewer indices than the reservation's batch");
    }
};

/// A KV-cache slot allocator (kvp_pool). Index buffers must have the pool's index type.
///
/// Destructor (and move-assignment over a pool): kvp_pool_free, which never throws, never
/// waits for the GPU and never synchronizes. A device pool may be destroyed while its
/// *_async calls are still queued on a stream — e.g. while an exception thrown after
/// enqueueing them unwinds the stack: its device memory is freed only after the last of them
/// has run (stream-ordered release). Device buffers you passed to those calls must stay
/// alive until the stream passes them, as always.
class pool : public detail::owner<kvp_pool> {
public:
    /// A pool from `config` (start from kvp_pool_config_default() and set `size`).
    explicit pool(const kvp_pool_config &config) {
        check_abi_version();
        kvp_pool *raw = nullptr;
        check(kvp_pool_new(&config, &raw), "kvp_pool_new");
        *this = pool(raw);
    }

    /// A host pool of `size` slots in pages of `page_size`, indices of type `Index`.
    template <class Index = int64_t>
    static pool create(uint64_t size, uint32_t page_size = 1, bool need_sort = false) {
        kvp_pool_config config = kvp_pool_config_default();
        config.size = size;
        config.page_size = page_size;
        config.index_type = detail::index_type_of<Index>();
        config.need_sort = need_sort;
        return pool(config);
    }

    /// A device pool on CUDA device `device` (its primary context, the one the CUDA runtime
    /// and PyTorch use): `size` slots in pages of `page_size`, indices of type `Index`.
    /// Throws KVP_STATUS_CUDA_UNAVAILABLE without a driver or without that device.
    template <class Index = int64_t>
    static pool create_cuda(int32_t device, uint64_t size, uint32_t page_size = 1,
                            bool need_sort = false) {
        kvp_pool_config config = kvp_pool_config_default();
        config.size = size;
        config.page_size = page_size;
        config.index_type = detail::index_type_of<Index>();
        config.need_sort = need_sort;
        config.backend = KVP_BACKEND_CUDA;
        config.device = device;
        return pool(config);
    }

    /// Takes ownership of `raw` (from kvp_pool_new); throws, without taking it, if it is NULL.
    static pool adopt(kvp_pool *raw) { return pool(detail::adoptable(raw, "kvpool::pool::adopt")); }

    // ---- queries ----

    kvp_pool_info info() const {
        kvp_pool_info out{};
        check(kvp_pool_get_info(get(), &out), "kvp_pool_get_info");
        return out;
    }
    kvp_index_type index_type() const noexcept { return index_type_; }
    uint32_t page_size() const noexcept { return page_size_; }
    /// True for a device pool (KVP_BACKEND_CUDA).
    bool is_device() const noexcept { return device_ >= 0; }
    /// The CUDA device ordinal of a device pool, -1 for a host pool.
    int32_t device() const noexcept { return device_; }

    /// Free token slots (SGLang's available_size()); a lower bound on a device pool while a
    /// paged free by index is in flight (see available_size_bound()).
    uint64_t available_size() const {
        uint64_t out = 0;
        check(kvp_pool_available_size(get(), &out), "kvp_pool_available_size");
        return out;
    }
    kvp_pool_stats stats() const {
        kvp_pool_stats out{};
        check(kvp_pool_get_stats(get(), &out), "kvp_pool_get_stats");
        return out;
    }

    /// What an alloc_extend (or alloc_extend_async) of these lengths would take, computed by
    /// its own host planning without allocating (kvp_pool_extend_need): `pages` from the free
    /// list, `tokens` written (its extend_num_tokens). The allocation runs short iff
    /// pages * page_size() > available_size(). Either backend (host arrays).
    struct extend_need_t {
        uint64_t pages = 0;
        uint64_t tokens = 0;
    };
    template <class PrefixLens, class SeqLens>
    extend_need_t extend_need(const PrefixLens &prefix_lens, const SeqLens &seq_lens) const {
        detail::require_lengths(prefix_lens);
        detail::require_lengths(seq_lens);
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(prefix_lens) == batch, "kvp_pool_extend_need",
                      "prefix_lens and seq_lens");
        extend_need_t out;
        check(kvp_pool_extend_need(get(), std::data(prefix_lens), std::data(seq_lens), batch,
                                   &out.pages, &out.tokens),
              "kvp_pool_extend_need");
        return out;
    }
    /// Pages an alloc_decode of these lengths (each counting the new token) would take
    /// (kvp_pool_decode_need).
    template <class Lens>
    uint64_t decode_need(const Lens &seq_lens) const {
        detail::require_lengths(seq_lens);
        uint64_t out = 0;
        check(kvp_pool_decode_need(get(), std::data(seq_lens), std::size(seq_lens), &out),
              "kvp_pool_decode_need");
        return out;
    }

    // ---- allocation ----

    /// Allocates `num_tokens` slots into out[0 .. num_tokens).
    template <class Out>
    void alloc(std::size_t num_tokens, Out &&out) {
        require_index<detail::element_t<Out>>("out");
        check(kvp_pool_alloc(get(), num_tokens, std::data(out), std::size(out)), "kvp_pool_alloc");
    }
    /// As above, returning a vector of `num_tokens` slots (more than the pool's size throws
    /// KVP_STATUS_OUT_OF_SLOTS before a vector is made).
    template <class Index = int64_t>
    std::vector<Index> alloc(std::size_t num_tokens) {
        if (num_tokens > size_) throw_beyond_pool("kvp_pool_alloc", num_tokens);
        std::vector<Index> out(num_tokens);
        alloc(num_tokens, out);
        return out;
    }

    /// Prefill/extend batch: request i grows from prefix_lens[i] to seq_lens[i] tokens, its
    /// last cached token in slot last_loc[i] (-1: empty prefix); the new slots go to
    /// out[0 .. extend_num_tokens), request after request.
    template <class PrefixLens, class SeqLens, class LastLoc, class Out>
    void alloc_extend(const PrefixLens &prefix_lens, const SeqLens &seq_lens,
                      const LastLoc &last_loc, std::size_t extend_num_tokens, Out &&out) {
        detail::require_lengths(prefix_lens);
        detail::require_lengths(seq_lens);
        require_index<detail::element_t<LastLoc>>("last_loc");
        require_index<detail::element_t<Out>>("out");
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(prefix_lens) == batch && std::size(last_loc) == batch,
                      "kvp_pool_alloc_extend", "prefix_lens, seq_lens and last_loc");
        check(kvp_pool_alloc_extend(get(), std::data(prefix_lens), std::data(seq_lens),
                                    std::data(last_loc), batch, extend_num_tokens,
                                    std::data(out), std::size(out)),
              "kvp_pool_alloc_extend");
    }
    /// As above, returning a vector of sum(seq_lens - prefix_lens) slots. A sum beyond the
    /// pool's size is refused before a vector is made: the library's KVP_STATUS_INVALID_LENGTHS
    /// for a length beyond the pool, else KVP_STATUS_OUT_OF_SLOTS.
    template <class PrefixLens, class SeqLens, class LastLoc>
    std::vector<detail::element_t<LastLoc>> alloc_extend(const PrefixLens &prefix_lens,
                                                         const SeqLens &seq_lens,
                                                         const LastLoc &last_loc) {
        detail::require_lengths(prefix_lens);
        detail::require_lengths(seq_lens);
        const std::size_t total = detail::extend_total(prefix_lens, seq_lens);
        if (total > size_) {
            (void)extend_need(prefix_lens, seq_lens);  // throws for the lengths it refuses
            throw_beyond_pool("kvp_pool_alloc_extend", total);
        }
        std::vector<detail::element_t<LastLoc>> out(total);
        alloc_extend(prefix_lens, seq_lens, last_loc, out.size(), out);
        return out;
    }

    /// Decode step: one slot per request; seq_lens[i] counts the new token, last_loc[i] is
    /// the slot of the previous last token. Slots go to out[0 .. batch).
    template <class Lens, class LastLoc, class Out>
    void alloc_decode(const Lens &seq_lens, const LastLoc &last_loc, Out &&out) {
        detail::require_lengths(seq_lens);
        require_index<detail::element_t<LastLoc>>("last_loc");
        require_index<detail::element_t<Out>>("out");
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(last_loc) == batch, "kvp_pool_alloc_decode",
                      "seq_lens and last_loc");
        check(kvp_pool_alloc_decode(get(), std::data(seq_lens), std::data(last_loc), batch,
                                    std::data(out), std::size(out)),
              "kvp_pool_alloc_decode");
    }
    template <class Lens, class LastLoc>
    std::vector<detail::element_t<LastLoc>> alloc_decode(const Lens &seq_lens,
                                                         const LastLoc &last_loc) {
        std::vector<detail::element_t<LastLoc>> out(std::size(seq_lens));
        alloc_decode(seq_lens, last_loc, out);
        return out;
    }

    // ---- decode reservations (kvp_decode_reservation) ----

    /// Reserves `steps` decode steps of a batch (host pool): lens[i] tokens held now,
    /// last_loc[i] the slot of the last one (-1 when lens[i] == 0). The pages are taken now,
    /// in the order `steps` alloc_decode calls would take them.
    template <class Lens, class LastLoc>
    decode_reservation reserve_decode(const Lens &lens, const LastLoc &last_loc,
                                      uint32_t steps) {
        detail::require_lengths(lens);
        require_index<detail::element_t<LastLoc>>("last_loc");
        const std::size_t batch = std::size(lens);
        require_batch(std::size(last_loc) == batch, "kvp_pool_reserve_decode",
                      "lens and last_loc");
        kvp_decode_reservation *raw = nullptr;
        check(kvp_pool_reserve_decode(get(), std::data(lens), std::data(last_loc), batch, steps,
                                      &raw),
              "kvp_pool_reserve_decode");
        return decode_reservation::adopt(raw, index_type_);
    }
    /// Ends a host pool's reservation after `steps_used` steps: unused pages back to the
    /// front of the free list, partly used pages rewound.
    void finish_reservation(decode_reservation &reservation, uint32_t steps_used) {
        check(kvp_decode_reservation_finish(get(), reservation.get(), steps_used),
              "kvp_decode_reservation_finish");
    }


    /// alloc_extend by request rows: last_loc read from table[rows[i]][prefix_lens[i] - 1],
    /// new slots written to table[rows[i]][prefix_lens[i] .. seq_lens[i]) and to `out`
    /// (out_cache_loc; pass an empty container to skip it). Rows distinct and in the table.
    template <class Rows, class PrefixLens, class SeqLens, class Out>
    void alloc_extend_rows(const kvp_req_table &table, const Rows &rows,
                           const PrefixLens &prefix_lens, const SeqLens &seq_lens,
                           std::size_t extend_num_tokens, Out &&out) {
        detail::require_lengths(rows);
        detail::require_lengths(prefix_lens);
        detail::require_lengths(seq_lens);
        require_index<detail::element_t<Out>>("out");
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(prefix_lens) == batch && std::size(rows) == batch,
                      "kvp_pool_alloc_extend_rows", "rows, prefix_lens and seq_lens");
        check(kvp_pool_alloc_extend_rows(get(), &table, std::data(rows), std::data(prefix_lens),
                                         std::data(seq_lens), batch, extend_num_tokens,
                                         std::size(out) ? std::data(out) : nullptr,
                                         std::size(out)),
              "kvp_pool_alloc_extend_rows");
    }
    /// As above, without out_cache_loc (the table alone receives the slots).
    template <class Rows, class PrefixLens, class SeqLens>
    void alloc_extend_rows(const kvp_req_table &table, const Rows &rows,
                           const PrefixLens &prefix_lens, const SeqLens &seq_lens,
                           std::size_t extend_num_tokens) {
        detail::require_lengths(rows);
        detail::require_lengths(prefix_lens);
        detail::require_lengths(seq_lens);
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(prefix_lens) == batch && std::size(rows) == batch,
                      "kvp_pool_alloc_extend_rows", "rows, prefix_lens and seq_lens");
        check(kvp_pool_alloc_extend_rows(get(), &table, std::data(rows), std::data(prefix_lens),
                                         std::data(seq_lens), batch, extend_num_tokens, nullptr,
                                         0),
              "kvp_pool_alloc_extend_rows");
    }

    /// alloc_decode by request rows: last_loc from table[rows[i]][seq_lens[i] - 2], the new
    /// slot into table[rows[i]][seq_lens[i] - 1] (and out[i] when `out` is not empty).
    template <class Rows, class SeqLens, class Out>
    void alloc_decode_rows(const kvp_req_table &table, const Rows &rows, const SeqLens &seq_lens,
                           Out &&out) {
        detail::require_lengths(rows);
        detail::require_lengths(seq_lens);
        require_index<detail::element_t<Out>>("out");
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(rows) == batch, "kvp_pool_alloc_decode_rows", "rows and seq_lens");
        check(kvp_pool_alloc_decode_rows(get(), &table, std::data(rows), std::data(seq_lens),
                                         batch, std::size(out) ? std::data(out) : nullptr,
                                         std::size(out)),
              "kvp_pool_alloc_decode_rows");
    }
    template <class Rows, class SeqLens>
    void alloc_decode_rows(const kvp_req_table &table, const Rows &rows, const SeqLens &seq_lens) {
        detail::require_lengths(rows);
        detail::require_lengths(seq_lens);
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(rows) == batch, "kvp_pool_alloc_decode_rows", "rows and seq_lens");
        check(kvp_pool_alloc_decode_rows(get(), &table, std::data(rows), std::data(seq_lens),
                                         batch, nullptr, 0),
              "kvp_pool_alloc_decode_rows");
    }

    /// Frees table[rows[i]][starts[i] .. ends[i]) for every i, as one call.
    template <class Rows, class Starts, class Ends>
    void free_rows(const kvp_req_table &table, const Rows &rows, const Starts &starts,
                   const Ends &ends) {
        detail::require_lengths(rows);
        detail::require_lengths(starts);
        detail::require_lengths(ends);
        const std::size_t batch = std::size(rows);
        require_batch(std::size(starts) == batch && std::size(ends) == batch, "kvp_pool_free_rows",
                      "rows, starts and ends");
        check(kvp_pool_free_rows(get(), &table, std::data(rows), std::data(starts),
                                 std::data(ends), batch),
              "kvp_pool_free_rows");
    }

    /// FlashInfer's page table of rows[i]'s first seq_lens[i] tokens (kvp_pool_page_table).
    template <class Rows, class SeqLens>
    page_table_t page_table(const kvp_req_table &table, const Rows &rows,
                            const SeqLens &seq_lens) const {
        detail::require_lengths(rows);
        detail::require_lengths(seq_lens);
        const std::size_t batch = std::size(seq_lens);
        require_batch(std::size(rows) == batch, "kvp_pool_page_table", "rows and seq_lens");
        // Sized from the lengths the library accepts (0 .. row_len; it refuses the others), and
        // only up to its INT32_MAX pages: rows may repeat, so valid lengths can add up past
        // that, which it refuses (then kv_indices stays empty rather than gigabytes).
        constexpr std::size_t max_pages = std::numeric_limits<int32_t>::max();
        std::size_t pages = 0;
        for (std::size_t i = 0; i < batch && pages <= max_pages; ++i) {
            const int64_t s = std::data(seq_lens)[i];
            if (s <= 0 || page_size_ == 0) continue;
            const uint64_t len = std::min<uint64_t>(static_cast<uint64_t>(s), table.row_len);
            pages += static_cast<std::size_t>(len / page_size_ + (len % page_size_ != 0));
        }
        if (pages > max_pages) pages = 0;
        page_table_t t{std::vector<int32_t>(batch + 1), std::vector<int32_t>(pages),
                       std::vector<int32_t>(batch)};
        check(kvp_pool_page_table(get(), &table, std::data(rows), std::data(seq_lens), batch,
                                  t.kv_indptr.data(), t.kv_indices.data(), t.kv_indices.size(),
                                  t.kv_last_page_len.data()),
              "kvp_pool_page_table");
        return t;
    }

    // ---- frees ----

    /// Frees slots by index (a paged pool frees each index's page).
    template <class Indices>
    void free_indices(const Indices &indices) {
        require_index<detail::element_t<Indices>>("indices");
        check(kvp_pool_free_indices(get(), std::data(indices), std::size(indices)),
              "kvp_pool_free_indices");
    }
    /// Frees exactly these pages, in this order.
    template <class PageIds>
    void free_pages(const PageIds &page_ids) {
        require_index<detail::element_t<PageIds>>("page_ids");
        check(kvp_pool_free_pages(get(), std::data(page_ids), std::size(page_ids)),
              "kvp_pool_free_pages");
    }
    /// Moves the pages of `last_kept` back to end at those slots (rejected speculative
    /// tokens): the next continuation from `last_kept[i]` gets the slots after it again.
    template <class Slots>
    void rewind(const Slots &last_kept) {
        require_index<detail::element_t<Slots>>("last_kept");
        check(kvp_pool_rewind(get(), std::data(last_kept), std::size(last_kept)),
              "kvp_pool_rewind");
    }
    /// Frees the pages holding row[start_pos .. start_pos + len).
    template <class Row>
    void free_segment(const Row &row, std::size_t start_pos, std::size_t len) {
        require_index<detail::element_t<Row>>("row");
        check(kvp_pool_free_segment(get(), std::data(row), std::size(row), start_pos, len),
              "kvp_pool_free_segment");
    }

    void free_group_begin() {
        check(kvp_pool_free_group_begin(get()), "kvp_pool_free_group_begin");
    }
    void free_group_end() {
        check(kvp_pool_free_group_end(get()), "kvp_pool_free_group_end");
    }

    /// Scope guard for a free group: begins it, and end() (or the destructor) ends it — with
    /// free_group_end(), or for free_group_async(stream) with free_group_end_async(stream).
    /// It holds the C handle: the pool may be moved while the group is open, but must not be
    /// destroyed or assigned over before the guard ends (the guard would then end the group
    /// on a freed handle).
    class free_group_guard {
    public:
        explicit free_group_guard(pool &p) : handle_(p.get()) { p.free_group_begin(); }
        free_group_guard(pool &p, stream_t stream)
            : handle_(p.get()), stream_(stream), async_(true) {
            p.free_group_begin();
        }
        free_group_guard(const free_group_guard &) = delete;
        free_group_guard &operator=(const free_group_guard &) = delete;
        /// Ends the group (throws on failure); the destructor then does nothing.
        void end() {
            kvp_pool *h = std::exchange(handle_, nullptr);
            if (h == nullptr) return;
            if (async_) {
                check(kvp_pool_free_group_end_async(h, stream_), "kvp_pool_free_group_end_async");
            } else {
                check(kvp_pool_free_group_end(h), "kvp_pool_free_group_end");
            }
        }
        /// Ends the group if end() was not called; a failure there cannot be reported.
        ~free_group_guard() {
            if (handle_ == nullptr) return;
            if (async_) {
                (void)kvp_pool_free_group_end_async(handle_, stream_);
            } else {
                (void)kvp_pool_free_group_end(handle_);
            }
        }

    private:
        // The C handle, not the wrapper: moving the `pool` object while the group is open
        // keeps the handle (and the group) where it was, so the guard still ends it.
        kvp_pool *handle_;
        stream_t stream_ = nullptr;
        bool async_ = false;
    };
    [[nodiscard]] free_group_guard free_group() { return free_group_guard(*this); }
    /// A free group of a device pool, ended on `stream`.
    [[nodiscard]] free_group_guard free_group_async(stream_t stream) {
        return free_group_guard(*this, stream);
    }

    void merge_and_sort_free() {
        check(kvp_pool_merge_and_sort_free(get()), "kvp_pool_merge_and_sort_free");
    }
    void clear() { check(kvp_pool_clear(get()), "kvp_pool_clear"); }

    // ---- snapshots ----

    snapshot backup_state() const {
        kvp_snapshot *raw = nullptr;
        check(kvp_pool_backup_state(get(), &raw), "kvp_pool_backup_state");
        return snapshot::adopt(raw);
    }
    void restore_state(const snapshot &saved) {
        check(kvp_pool_restore_state(get(), saved.get()), "kvp_pool_restore_state");
    }

    // ---- device pools (KVP_BACKEND_CUDA) ----
    //
    // Each call enqueues on `stream` and returns without synchronizing. Host arrays
    // (`*_host`) are read during the call only; device_spans must stay allocated — inputs
    // unchanged, outputs not read — until the stream passes the call. Outputs are written in
    // the same order as by the host calls of the same name.

    /// Allocates `num_tokens` slots into out[0 .. num_tokens) (device).
    template <class Out>
    void alloc_async(std::size_t num_tokens, device_span<Out> out, stream_t stream) {
        require_device_out<Out>("out");
        check(kvp_pool_alloc_async(get(), num_tokens, out.data(), out.size(), stream),
              "kvp_pool_alloc_async");
    }

    /// Prefill/extend batch on the device: as alloc_extend, with the lengths twice — on the
    /// host (`prefix_lens_host`, `seq_lens_host`: kvpool plans and checks the allocation from
    /// them, so the shortage check needs no synchronization) and on the device
    /// (`prefix_lens`, `seq_lens`, with `last_loc`, read by the kernels). The new slots go to
    /// out[0 .. extend_num_tokens).
    template <class PrefixLensHost, class SeqLensHost, class LastLoc, class Out>
    void alloc_extend_async(const PrefixLensHost &prefix_lens_host,
                            const SeqLensHost &seq_lens_host,
                            device_span<const int64_t> prefix_lens,
                            device_span<const int64_t> seq_lens, device_span<LastLoc> last_loc,
                            std::size_t extend_num_tokens, device_span<Out> out,
                            stream_t stream) {
        detail::require_lengths(prefix_lens_host);
        detail::require_lengths(seq_lens_host);
        require_index<std::remove_const_t<LastLoc>>("last_loc");
        require_device_out<Out>("out");
        const std::size_t batch = std::size(seq_lens_host);
        require_batch(std::size(prefix_lens_host) == batch && prefix_lens.size() == batch &&
                          seq_lens.size() == batch && last_loc.size() == batch,
                      "kvp_pool_alloc_extend_async",
                      "prefix_lens, seq_lens, last_loc and the host copies");
        check(kvp_pool_alloc_extend_async(get(), std::data(prefix_lens_host),
                                          std::data(seq_lens_host), prefix_lens.data(),
                                          seq_lens.data(), last_loc.data(), batch,
                                          extend_num_tokens, out.data(), out.size(), stream),
              "kvp_pool_alloc_extend_async");
    }
    /// As above, with extend_num_tokens = sum(seq_lens_host - prefix_lens_host).
    template <class PrefixLensHost, class SeqLensHost, class LastLoc, class Out>
    void alloc_extend_async(const PrefixLensHost &prefix_lens_host,
                            const SeqLensHost &seq_lens_host,
                            device_span<const int64_t> prefix_lens,
                            device_span<const int64_t> seq_lens, device_span<LastLoc> last_loc,
                            device_span<Out> out, stream_t stream) {
        detail::require_lengths(prefix_lens_host);
        detail::require_lengths(seq_lens_host);
        // (the library refuses lengths the sum skips, with KVP_STATUS_INVALID_LENGTHS)
        alloc_extend_async(prefix_lens_host, seq_lens_host, prefix_lens, seq_lens, last_loc,
                           detail::extend_total(prefix_lens_host, seq_lens_host), out, stream);
    }

    /// Decode step on the device: one slot per request into out[0 .. batch); `seq_lens_host`
    /// is the host copy of `seq_lens` (both count the new token).
    template <class SeqLensHost, class LastLoc, class Out>
    void alloc_decode_async(const SeqLensHost &seq_lens_host, device_span<const int64_t> seq_lens,
                            device_span<LastLoc> last_loc, device_span<Out> out,
                            stream_t stream) {
        detail::require_lengths(seq_lens_host);
        require_index<std::remove_const_t<LastLoc>>("last_loc");
        require_device_out<Out>("out");
        const std::size_t batch = std::size(seq_lens_host);
        require_batch(seq_lens.size() == batch && last_loc.size() == batch,
                      "kvp_pool_alloc_decode_async", "seq_lens, last_loc and seq_lens_host");
        check(kvp_pool_alloc_decode_async(get(), std::data(seq_lens_host), seq_lens.data(),
                                          last_loc.data(), batch, out.data(), out.size(),
                                          stream),
              "kvp_pool_alloc_decode_async");
    }

    /// Reserves `steps` decode steps of a batch on the device (kvp_pool_reserve_decode_async):
    /// `lens_host` is the host copy of `lens` (device); `last_loc` is a device array.
    template <class LensHost, class LastLoc>
    decode_reservation reserve_decode_async(const LensHost &lens_host,
                                            device_span<const int64_t> lens,
                                            device_span<LastLoc> last_loc, uint32_t steps,
                                            stream_t stream) {
        detail::require_lengths(lens_host);
        require_index<std::remove_const_t<LastLoc>>("last_loc");
        const std::size_t batch = std::size(lens_host);
        require_batch(lens.size() == batch && last_loc.size() == batch,
                      "kvp_pool_reserve_decode_async", "lens, last_loc and lens_host");
        kvp_decode_reservation *raw = nullptr;
        check(kvp_pool_reserve_decode_async(get(), std::data(lens_host), lens.data(),
                                            last_loc.data(), batch, steps, &raw, stream),
              "kvp_pool_reserve_decode_async");
        return decode_reservation::adopt(raw, index_type_);
    }
    /// Enqueues the end of a device pool's reservation after `steps_used` steps (replays
    /// included); the kernel checks the count against the device's.
    void finish_reservation_async(decode_reservation &reservation, uint32_t steps_used,
                                  stream_t stream) {
        check(kvp_decode_reservation_finish_async(get(), reservation.get(), steps_used, stream),
              "kvp_decode_reservation_finish_async");
    }

    /// alloc_extend_rows on the device (kvp_pool_alloc_extend_rows_async): `table` describes
    /// device memory, `rows` / lengths are device arrays with host copies of the lengths;
    /// `out` (out_cache_loc) may be an empty span.
    template <class PrefixLensHost, class SeqLensHost, class Out>
    void alloc_extend_rows_async(const kvp_req_table &table, device_span<const int64_t> rows,
                                 const PrefixLensHost &prefix_lens_host,
                                 const SeqLensHost &seq_lens_host,
                                 device_span<const int64_t> prefix_lens,
                                 device_span<const int64_t> seq_lens,
                                 std::size_t extend_num_tokens, device_span<Out> out,
                                 stream_t stream) {
        detail::require_lengths(prefix_lens_host);
        detail::require_lengths(seq_lens_host);
        require_device_out<Out>("out");
        const std::size_t batch = std::size(seq_lens_host);
        require_batch(std::size(prefix_lens_host) == batch && prefix_lens.size() == batch &&
                          seq_lens.size() == batch && rows.size() == batch,
                      "kvp_pool_alloc_extend_rows_async",
                      "rows, prefix_lens, seq_lens and the host copies");
        check(kvp_pool_alloc_extend_rows_async(get(), &table, rows.data(),
                                               std::data(prefix_lens_host),
                                               std::data(seq_lens_host), prefix_lens.data(),
                                               seq_lens.data(), batch, extend_num_tokens,
                                               out.empty() ? nullptr : out.data(), out.size(),
                                               stream),
              "kvp_pool_alloc_extend_rows_async");
    }

    /// alloc_decode_rows on the device (kvp_pool_alloc_decode_rows_async); `out` may be an
    /// empty span.
    template <class SeqLensHost, class Out>
    void alloc_decode_rows_async(const kvp_req_table &table, device_span<const int64_t> rows,
                                 const SeqLensHost &seq_lens_host,
                                 device_span<const int64_t> seq_lens, device_span<Out> out,
                                 stream_t stream) {
        detail::require_lengths(seq_lens_host);
        require_device_out<Out>("out");
        const std::size_t batch = std::size(seq_lens_host);
        require_batch(seq_lens.size() == batch && rows.size() == batch,
                      "kvp_pool_alloc_decode_rows_async", "rows, seq_lens and seq_lens_host");
        check(kvp_pool_alloc_decode_rows_async(get(), &table, rows.data(),
                                               std::data(seq_lens_host), seq_lens.data(), batch,
                                               out.empty() ? nullptr : out.data(), out.size(),
                                               stream),
              "kvp_pool_alloc_decode_rows_async");
    }

    /// free_rows on the device (kvp_pool_free_rows_async).
    template <class StartsHost, class EndsHost>
    void free_rows_async(const kvp_req_table &table, device_span<const int64_t> rows,
                         const StartsHost &starts_host, const EndsHost &ends_host,
                         device_span<const int64_t> starts, device_span<const int64_t> ends,
                         stream_t stream) {
        detail::require_lengths(starts_host);
        detail::require_lengths(ends_host);
        const std::size_t batch = std::size(starts_host);
        require_batch(std::size(ends_host) == batch && rows.size() == batch &&
                          starts.size() == batch && ends.size() == batch,
                      "kvp_pool_free_rows_async", "rows, starts, ends and the host copies");
        check(kvp_pool_free_rows_async(get(), &table, rows.data(), std::data(starts_host),
                                       std::data(ends_host), starts.data(), ends.data(), batch,
                                       stream),
              "kvp_pool_free_rows_async");
    }

    /// Sizes the by-row calls' device scratch for calls of up to `batch_size` requests and
    /// `slots` slots on tables of up to `table_rows` rows
    /// (kvp_pool_reserve_scratch_async): call it before capturing such calls into a CUDA
    /// graph, where a call that would have to grow the scratch is refused.
    void reserve_scratch_async(uint64_t table_rows, std::size_t batch_size, uint64_t slots,
                               stream_t stream) {
        check(kvp_pool_reserve_scratch_async(get(), table_rows, batch_size, slots, stream),
              "kvp_pool_reserve_scratch_async");
    }

    /// FlashInfer page table on the device (kvp_pool_page_table_async) into fixed int32
    /// device buffers; also fills the host copies `kv_indptr_host` (batch + 1) and
    /// `kv_last_page_len_host` (batch) when both are non-empty (for an empty batch, when
    /// `kv_indptr_host` is).
    template <class SeqLensHost>
    void page_table_async(const kvp_req_table &table, device_span<const int64_t> rows,
                          const SeqLensHost &seq_lens_host, device_span<const int64_t> seq_lens,
                          device_span<int32_t> kv_indptr, device_span<int32_t> kv_indices,
                          device_span<int32_t> kv_last_page_len, span<int32_t> kv_indptr_host,
                          span<int32_t> kv_last_page_len_host, stream_t stream) {
        detail::require_lengths(seq_lens_host);
        const std::size_t batch = std::size(seq_lens_host);
        require_batch(seq_lens.size() == batch && rows.size() == batch &&
                          kv_indptr.size() >= batch + 1 && kv_last_page_len.size() >= batch,
                      "kvp_pool_page_table_async",
                      "rows, seq_lens, kv_indptr (batch + 1), kv_last_page_len");
        const bool host =
            !kv_indptr_host.empty() && (batch == 0 || !kv_last_page_len_host.empty());
        if (host)
            require_batch(kv_indptr_host.size() >= batch + 1 &&
                              kv_last_page_len_host.size() >= batch,
                          "kvp_pool_page_table_async", "the host copies");
        check(kvp_pool_page_table_async(get(), &table, rows.data(), std::data(seq_lens_host),
                                        seq_lens.data(), batch, kv_indptr.data(),
                                        kv_indices.data(), kv_indices.size(),
                                        kv_last_page_len.data(),
                                        host ? kv_indptr_host.data() : nullptr,
                                        host ? kv_last_page_len_host.data() : nullptr, stream),
              "kvp_pool_page_table_async");
    }

    /// Frees slots by index (device); a paged pool frees each index's page.
    template <class Index>
    void free_indices_async(device_span<Index> indices, stream_t stream) {
        require_index<std::remove_const_t<Index>>("indices");
        check(kvp_pool_free_indices_async(get(), indices.data(), indices.size(), stream),
              "kvp_pool_free_indices_async");
    }
    /// Moves the pages of `last_kept` (device) back to end at those slots; see rewind().
    template <class Index>
    void rewind_async(device_span<Index> last_kept, stream_t stream) {
        require_index<std::remove_const_t<Index>>("last_kept");
        check(kvp_pool_rewind_async(get(), last_kept.data(), last_kept.size(), stream),
              "kvp_pool_rewind_async");
    }
    /// Frees exactly these pages (device), in this order.
    template <class Index>
    void free_pages_async(device_span<Index> page_ids, stream_t stream) {
        require_index<std::remove_const_t<Index>>("page_ids");
        check(kvp_pool_free_pages_async(get(), page_ids.data(), page_ids.size(), stream),
              "kvp_pool_free_pages_async");
    }
    /// Frees the pages holding row[start_pos .. start_pos + len); `row` is a request's slot
    /// row in device memory (its req_to_token row).
    template <class Index>
    void free_segment_async(device_span<Index> row, std::size_t start_pos, std::size_t len,
                            stream_t stream) {
        require_index<std::remove_const_t<Index>>("row");
        check(kvp_pool_free_segment_async(get(), row.data(), row.size(), start_pos, len, stream),
              "kvp_pool_free_segment_async");
    }
    /// Ends the free group (opened by free_group_begin()) on the device.
    void free_group_end_async(stream_t stream) {
        check(kvp_pool_free_group_end_async(get(), stream), "kvp_pool_free_group_end_async");
    }
    void merge_and_sort_free_async(stream_t stream) {
        check(kvp_pool_merge_and_sort_free_async(get(), stream),
              "kvp_pool_merge_and_sort_free_async");
    }
    /// Frees every slot; also recovers a pool with a device fault.
    void clear_async(stream_t stream) {
        check(kvp_pool_clear_async(get(), stream), "kvp_pool_clear_async");
    }

    /// The pool's state as the stream reaches this call (copied on the device).
    snapshot backup_state_async(stream_t stream) {
        kvp_snapshot *raw = nullptr;
        check(kvp_pool_backup_state_async(get(), &raw, stream), "kvp_pool_backup_state_async");
        return snapshot::adopt(raw);
    }
    /// Returns to `saved`; also recovers a pool with a device fault.
    void restore_state_async(const snapshot &saved, stream_t stream) {
        check(kvp_pool_restore_state_async(get(), saved.get(), stream),
              "kvp_pool_restore_state_async");
    }

    /// Throws kvpool::error (KVP_STATUS_DEVICE_FAULT; the message names the call, the element
    /// and its value) if a kernel has found invalid input, or KVP_STATUS_CUDA_ERROR while the
    /// pool refuses work after a call whose kernels were only partly enqueued. Polls without
    /// synchronizing: work the stream has not reached yet is not judged.
    void check_device() { check(kvp_pool_check_device(get()), "kvp_pool_check_device"); }

    // ---- debugging (kvp_pool_set_debug) ----

    /// Switches debug checks on (an or of kvp_debug flags) or off (0). With
    /// KVP_DEBUG_STREAM_ORDER a device pool checks on the device that each call starts after
    /// the previous one has finished; a call from a stream not ordered with the previous
    /// call's faults the pool (KVP_STATUS_UNORDERED_STREAMS from the next call or
    /// check_device()). With KVP_DEBUG_REPLAY_CALLS a graph replayed at once repeats its
    /// captured call instead of faulting the pool (for timing a call; not for serving). A
    /// host pool accepts and ignores the flags.
    void set_debug(uint32_t flags) { check(kvp_pool_set_debug(get(), flags), "kvp_pool_set_debug"); }
    uint32_t debug_flags() const {
        uint32_t out = 0;
        check(kvp_pool_get_debug(get(), &out), "kvp_pool_get_debug");
        return out;
    }

    /// Free slots, and whether the count is exact: it is a lower bound while a paged free by
    /// index is in flight (its pages count once the stream has passed it).
    struct size_bound {
        uint64_t available = 0;
        bool exact = false;
    };
    size_bound available_size_bound() const {
        size_bound out;
        check(kvp_pool_available_size_bound(get(), &out.available, &out.exact),
              "kvp_pool_available_size_bound");
        return out;
    }

    // ---- state digest (tensor parallelism: ranks compare it) ----

    /// A host pool's state digest (kvp_pool_digest): equal on two pools of the same
    /// configuration, of either backend, after the same operations.
    uint64_t digest() const {
        uint64_t out = 0;
        check(kvp_pool_digest(get(), &out), "kvp_pool_digest");
        return out;
    }
    /// Enqueues a device pool's state digest into `*out_device` (one uint64_t of device
    /// memory) on `stream`, without synchronizing (kvp_pool_digest_async).
    void digest_async(uint64_t *out_device, stream_t stream) {
        check(kvp_pool_digest_async(get(), out_device, stream), "kvp_pool_digest_async");
    }

private:
    explicit pool(kvp_pool *raw) : owner(raw) {
        kvp_pool_info facts{};
        check(kvp_pool_get_info(raw, &facts), "kvp_pool_get_info");
        index_type_ = static_cast<kvp_index_type>(facts.index_type);
        size_ = facts.size;
        page_size_ = facts.page_size;
        device_ = facts.backend == KVP_BACKEND_CUDA ? facts.device : -1;
    }

    template <class Out>
    void require_device_out(const char *what) const {
        static_assert(!std::is_const_v<Out>, "an output buffer must be writable");
        require_index<Out>(what);
    }

    // The checks above and below read the facts cached from the pool: a moved-from or
    // released pool has none, and throws KVP_STATUS_NULL_ARGUMENT as its C calls would.
    void require_handle(const char *call) const {
        if (!*this)
            throw error(KVP_STATUS_NULL_ARGUMENT, call,
                        "pool is NULL (a moved-from or released kvpool::pool)");
    }

    template <class Index>
    void require_index(const char *what) const {
        require_handle("kvpool::pool");
        constexpr kvp_index_type type = detail::index_type_of<Index>();
        if (type != index_type_) {
            throw error(KVP_STATUS_INVALID_ARGUMENT, "kvpool::pool",
                        std::string(what) + " holds " + detail::index_type_name(type) +
                            " but the pool's index type is " +
                            detail::index_type_name(index_type_));
        }
    }

    static void require_batch(bool ok, const char *call, const char *what) {
        if (!ok) {
            throw error(KVP_STATUS_INVALID_LENGTHS, call,
                        std::string(what) + " need one entry per request");
        }
    }

    // More slots than the pool has: no call could hand them out (the library's status for it).
    [[noreturn]] void throw_beyond_pool(const char *call, std::size_t tokens) const {
        require_handle(call);
        throw error(KVP_STATUS_OUT_OF_SLOTS, call,
                    std::to_string(tokens) + " tokens need more than the pool's " +
                        std::to_string(size_) + " slots");
    }

    kvp_index_type index_type_ = KVP_INDEX_TYPE_I64;
    uint64_t size_ = 0;
    uint32_t page_size_ = 0;
    int32_t device_ = -1;
};

// ---- scheduler ---------------------------------------------------------------------------

/// One step's plan, viewing the scheduler's arrays: valid until the scheduler's next step()
/// or its destruction. Copy what you need to keep.
struct step_plan {
    kvp_step_kind kind = KVP_STEP_KIND_IDLE;
    bool batch_is_full = false;
    double new_token_ratio = 0.0;
    span<const kvp_prefill_entry> prefill;  // chunk continuations first
    span<const uint64_t> decode;            // ids, each grows by one token
    span<const kvp_evicted> retracted;      // free their KV; they wait again
    span<const kvp_evicted> preempted;      // free their KV; they wait again
    span<const kvp_evicted> aborted;        // free their KV; they are gone

    explicit step_plan(const kvp_step_plan &c)
        : kind(static_cast<kvp_step_kind>(c.kind)),
          batch_is_full(c.batch_is_full),
          new_token_ratio(c.new_token_ratio),
          prefill(c.prefill, c.num_prefill),
          decode(c.decode, c.num_decode),
          retracted(c.retracted, c.num_retracted),
          preempted(c.preempted, c.num_preempted),
          aborted(c.aborted, c.num_aborted) {}
};

/// The continuous-batching scheduler (kvp_scheduler).
class scheduler : public detail::owner<kvp_scheduler> {
public:
    /// Detached: `config.capacity` and `config.page_size` must be set, and step() takes the
    /// pool's free tokens from the caller.
    explicit scheduler(const kvp_scheduler_config &config) : scheduler(config, nullptr) {}
    /// Attached to `kv`: capacity and page size come from the pool, step() reads its free
    /// size, and the scheduler keeps the native pool alive until it is destroyed. A
    /// moved-from `kv` throws KVP_STATUS_NULL_ARGUMENT (kvp_scheduler_new would take its NULL
    /// for a detached scheduler).
    scheduler(const kvp_scheduler_config &config, const pool &kv)
        : scheduler(config, attached(kv)) {}

    /// Takes ownership of `raw` (from kvp_scheduler_new); throws, without taking it, if NULL.
    static scheduler adopt(kvp_scheduler *raw) {
        return scheduler(detail::adoptable(raw, "kvpool::scheduler::adopt"));
    }

    /// Queues a request; `result.queued == false` means it can never fit (fail it).
    kvp_submit_result submit(const kvp_request &request, span<const uint64_t> prefix_path = {}) {
        kvp_submit_result out{};
        check(kvp_scheduler_submit(get(), &request, prefix_path.data(), prefix_path.size(), &out),
              "kvp_scheduler_submit");
        return out;
    }
    /// Refreshes a waiting request's cached prefix; an empty path keeps the previous one.
    void update_prefix(uint64_t id, uint64_t prefix_len, uint64_t prefix_evictable,
                       span<const uint64_t> prefix_path = {}) {
        check(kvp_scheduler_update_prefix(get(), id, prefix_len, prefix_evictable,
                                          prefix_path.data(), prefix_path.size()),
              "kvp_scheduler_update_prefix");
    }
    /// Plans the next step (`available` is ignored when attached to a pool).
    step_plan step(uint64_t available = 0, uint64_t evictable = 0, bool allow_prefill = true) {
        kvp_step_plan out{};
        check(kvp_scheduler_step(get(), available, evictable, allow_prefill, &out),
              "kvp_scheduler_step");
        return step_plan(out);
    }
    /// A running request finished; returns the KV tokens it held (for the engine to free).
    uint64_t finish(uint64_t id) {
        uint64_t kv_len = 0;
        check(kvp_scheduler_finish(get(), id, &kv_len), "kvp_scheduler_finish");
        return kv_len;
    }
    /// Drops a request in any phase; returns the KV tokens it held.
    uint64_t abort(uint64_t id) {
        uint64_t kv_len = 0;
        check(kvp_scheduler_abort(get(), id, &kv_len), "kvp_scheduler_abort");
        return kv_len;
    }
    /// finish() reporting what the request held (kvp_scheduler_finish_ex): its KV length and
    /// the leading prefix_len tokens of its row that are its locked cached prefix (unlock
    /// them; free or cache row[prefix_len .. kv_len)).
    kvp_finished finish_ex(uint64_t id) {
        kvp_finished out{};
        check(kvp_scheduler_finish_ex(get(), id, &out), "kvp_scheduler_finish_ex");
        return out;
    }
    /// abort() reporting what the request held (kvp_scheduler_abort_ex).
    kvp_finished abort_ex(uint64_t id) {
        kvp_finished out{};
        check(kvp_scheduler_abort_ex(get(), id, &out), "kvp_scheduler_abort_ex");
        return out;
    }
    kvp_request_state request(uint64_t id) const {
        kvp_request_state out{};
        check(kvp_scheduler_get_request(get(), id, &out), "kvp_scheduler_get_request");
        return out;
    }
    kvp_scheduler_stats stats() const {
        kvp_scheduler_stats out{};
        check(kvp_scheduler_get_stats(get(), &out), "kvp_scheduler_get_stats");
        return out;
    }
    /// The scheduler's state digest (kvp_scheduler_digest): equal on two schedulers of the
    /// same configuration given the same calls.
    uint64_t digest() const {
        uint64_t out = 0;
        check(kvp_scheduler_digest(get(), &out), "kvp_scheduler_digest");
        return out;
    }

private:
    explicit scheduler(kvp_scheduler *raw) noexcept : owner(raw) {}
    static const kvp_pool *attached(const pool &kv) {
        if (!kv)
            throw error(KVP_STATUS_NULL_ARGUMENT, "kvp_scheduler_new",
                        "the pool to attach is a moved-from kvpool::pool (NULL)");
        return kv.get();
    }
    scheduler(const kvp_scheduler_config &config, const kvp_pool *kv) {
        check_abi_version();
        kvp_scheduler *raw = nullptr;
        check(kvp_scheduler_new(&config, kv, &raw), "kvp_scheduler_new");
        *this = scheduler(raw);
    }
};

// ---- admission for engines with their own loop -------------------------------------------

/// One prefill pass's admission budget (kvp_adder).
class adder : public detail::owner<kvp_adder> {
public:
    adder(const kvp_adder_config &config, uint64_t available, uint64_t evictable,
          span<const kvp_running_request> running = {}, uint64_t chunked_in_flight = 0) {
        check_abi_version();
        kvp_adder *raw = nullptr;
        check(kvp_adder_new(&config, available, evictable, running.data(), running.size(),
                            chunked_in_flight, &raw),
              "kvp_adder_new");
        *this = adder(raw);
    }
    /// Takes ownership of `raw` (from kvp_adder_new); throws, without taking it, if NULL.
    static adder adopt(kvp_adder *raw) {
        return adder(detail::adoptable(raw, "kvpool::adder::adopt"));
    }

    kvp_admission add_one_req(const kvp_candidate &candidate) {
        kvp_admission out{};
        check(kvp_adder_add_one_req(get(), &candidate, &out), "kvp_adder_add_one_req");
        return out;
    }
    kvp_admission add_chunked_req(uint64_t prefix_len, uint64_t remaining,
                                  uint64_t max_new_tokens) {
        kvp_admission out{};
        check(kvp_adder_add_chunked_req(get(), prefix_len, remaining, max_new_tokens, &out),
              "kvp_adder_add_chunked_req");
        return out;
    }
    kvp_budget budget() const {
        kvp_budget out{};
        check(kvp_adder_get_budget(get(), &out), "kvp_adder_get_budget");
        return out;
    }

private:
    explicit adder(kvp_adder *raw) noexcept : owner(raw) {}
};

/// Data-parallel prefill negotiation (kvp_delayer).
class delayer : public detail::owner<kvp_delayer> {
public:
    explicit delayer(const kvp_delayer_config &config) {
        check_abi_version();
        kvp_delayer *raw = nullptr;
        check(kvp_delayer_new(&config, &raw), "kvp_delayer_new");
        *this = delayer(raw);
    }
    /// Takes ownership of `raw` (from kvp_delayer_new); throws, without taking it, if NULL.
    static delayer adopt(kvp_delayer *raw) {
        return delayer(detail::adoptable(raw, "kvpool::delayer::adopt"));
    }

    kvp_rank_info local_info(bool prefillable, double token_usage, uint64_t running_bs,
                             uint64_t waiting_len, bool timed_out = false) const {
        kvp_rank_info out{};
        check(kvp_delayer_local_info(get(), prefillable, token_usage, running_bs, waiting_len,
                                     timed_out, &out),
              "kvp_delayer_local_info");
        return out;
    }
    /// The verdict for this pass from every rank's info; prefill unless KVP_DELAY_VERDICT_DELAY.
    kvp_delay_verdict negotiate(span<const kvp_rank_info> ranks) {
        uint32_t out = 0;
        check(kvp_delayer_negotiate(get(), ranks.data(), ranks.size(), &out),
              "kvp_delayer_negotiate");
        return static_cast<kvp_delay_verdict>(out);
    }
    void record_prefill(uint64_t batch_size) {
        check(kvp_delayer_record_prefill(get(), batch_size), "kvp_delayer_record_prefill");
    }

private:
    explicit delayer(kvp_delayer *raw) noexcept : owner(raw) {}
};

}  // namespace kvpool

#endif  // C++17
#endif  // KVPOOL_HPP
