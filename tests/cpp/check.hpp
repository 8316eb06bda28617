// The check machinery the C++ test programs in tests/cpp share: counters, CHECK macros and
// the summary line tests/ffi_programs.rs reads. Header-only (inline variables, C++17);
// thread-safe, as abi_test.cpp and kvpool_hpp_test.cpp check from several threads.
#ifndef KVP_TESTS_CHECK_HPP
#define KVP_TESTS_CHECK_HPP

#include <atomic>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace kvp_test {

inline std::atomic<int> checks{0};
inline std::atomic<int> failures{0};
inline std::mutex report_mutex;
// The running test's name, shown in failure lines when set; set it only between tests.
inline const char *current_test = nullptr;

// Counts a check; a failed one is counted and printed to stderr, and the program goes on.
inline void check(bool ok, const char *file, int line, const std::string &what) {
    checks++;
    if (ok) return;
    failures++;
    std::lock_guard<std::mutex> lock(report_mutex);
    if (current_test != nullptr)
        std::fprintf(stderr, "FAIL [%s] %s:%d: %s\n", current_test, file, line, what.c_str());
    else
        std::fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what.c_str());
}

// An enum as its underlying integer, anything else as is: what CHECK_EQ compares and prints.
template <class T>
auto number(T value) {
    if constexpr (std::is_enum_v<T>) {
        return static_cast<std::underlying_type_t<T>>(value);
    } else {
        static_assert(std::is_arithmetic_v<T>, "CHECK_EQ compares numbers and enums");
        return value;
    }
}

// Integers (and enums) compare as long long, so that mixing signedness or enum and integer
// needs no casts and raises no -Wsign-compare; floating-point values compare as they are.
template <class A, class B>
void check_eq(A got, B want, const char *file, int line, const char *got_expr,
              const char *want_expr) {
    const auto g = number(got);
    const auto w = number(want);
    bool equal;
    if constexpr (std::is_integral_v<decltype(g)> && std::is_integral_v<decltype(w)>)
        equal = static_cast<long long>(g) == static_cast<long long>(w);
    else
        equal = g == w;
    check(equal, file, line,
          equal ? std::string()
                : std::string(got_expr) + " == " + want_expr + ": got " + std::to_string(g) +
                      ", want " + std::to_string(w));
}

template <class T>
std::string join(const std::vector<T> &v) {
    std::string s;
    for (T x : v) s += " " + std::to_string(x);
    return s;
}

template <class T>
void check_vec(const std::vector<T> &got, std::initializer_list<long long> want,
               const char *file, int line, const char *expr) {
    std::vector<T> w;
    for (long long x : want) w.push_back(static_cast<T>(x));
    const bool equal = got == w;
    check(equal, file, line,
          equal ? std::string() : std::string(expr) + ":" + join(got) + " !=" + join(w));
}

// Prints the summary line ("NAME (C++): all N checks passed", or how many failed) and
// returns main's exit status.
inline int summary(const char *name) {
    if (failures.load() != 0) {
        std::printf("%s (C++): %d of %d checks FAILED\n", name, failures.load(), checks.load());
        return 1;
    }
    std::printf("%s (C++): all %d checks passed\n", name, checks.load());
    return 0;
}

}  // namespace kvp_test

#define CHECK(cond) ::kvp_test::check(static_cast<bool>(cond), __FILE__, __LINE__, #cond)
#define CHECK_EQ(got, want) ::kvp_test::check_eq((got), (want), __FILE__, __LINE__, #got, #want)
#define CHECK_VEC(got, ...) ::kvp_test::check_vec((got), {__VA_ARGS__}, __FILE__, __LINE__, #got)
#define FAIL(what) ::kvp_test::check(false, __FILE__, __LINE__, (what))

#endif  // KVP_TESTS_CHECK_HPP
