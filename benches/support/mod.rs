//! The measuring harness shared by `benches/host_ops.rs` and `benches/scheduler.rs`: the
//! quick/full sampling mode, per-call timing, order statistics and the machine facts
//! printed in each report's header. Included by both with `mod support;` (cargo does not
//! treat `benches/support/mod.rs` as a bench target of its own).

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---- sampling ---------------------------------------------------------------------------

/// How many repetitions to run.
pub struct Mode {
    pub quick: bool,
    pub warmup: usize,
    pub max_samples: usize,
    pub min_samples: usize,
    /// A case stops adding samples after this long (including whatever untimed work each
    /// repetition does) once it has `min_samples`.
    pub budget: Duration,
}

impl Mode {
    /// Quick when `--quick` is passed or `KVPOOL_BENCH_QUICK` is set to anything but `0`.
    pub fn from_args_and_env() -> Self {
        let quick = std::env::args().any(|a| a == "--quick")
            || std::env::var("KVPOOL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        if quick {
            Self {
                quick,
                warmup: 3,
                max_samples: 30,
                min_samples: 10,
                budget: Duration::from_millis(20),
            }
        } else {
            Self {
                quick,
                warmup: 50,
                max_samples: 2000,
                min_samples: 101,
                budget: Duration::from_millis(400),
            }
        }
    }

    /// The header's `- mode:` line; `budget_note` follows "… ms budget" (e.g. " with
    /// untimed setup").
    pub fn header_line(&self, budget_note: &str) -> String {
        format!(
            "- mode: {} (warm-up {}, then up to {} samples per case, at least {}, {} ms \
             budget{budget_note})",
            if self.quick { "quick" } else { "full" },
            self.warmup,
            self.max_samples,
            self.min_samples,
            self.budget.as_millis(),
        )
    }
}

/// Order statistics of one case's per-call times, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub p10: u64,
    pub p50: u64,
    pub p90: u64,
    pub samples: usize,
}

impl Summary {
    fn of(mut ns: Vec<u64>) -> Self {
        ns.sort_unstable();
        let at = |p: usize| ns[(ns.len() - 1) * p / 100];
        Self {
            p10: at(10),
            p50: at(50),
            p90: at(90),
            samples: ns.len(),
        }
    }
}

/// Runs `rep(i)` for the warm-up, then collects its `K` timings per repetition until the
/// sample count or the time budget is reached.
pub fn sample<const K: usize>(mode: &Mode, mut rep: impl FnMut(usize) -> [u64; K]) -> [Summary; K] {
    for i in 0..mode.warmup {
        rep(i);
    }
    let mut lanes: [Vec<u64>; K] = std::array::from_fn(|_| Vec::with_capacity(mode.max_samples));
    let start = Instant::now();
    let mut i = mode.warmup;
    loop {
        let n = lanes[0].len();
        if n >= mode.max_samples || (n >= mode.min_samples && start.elapsed() > mode.budget) {
            break;
        }
        for (lane, ns) in lanes.iter_mut().zip(rep(i)) {
            lane.push(ns);
        }
        i += 1;
    }
    lanes.map(Summary::of)
}

/// Times one call of `f`; the result is returned (and kept alive) for the caller to check
/// and drop afterwards, untimed.
#[inline(always)]
pub fn timed<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let start = Instant::now();
    let result = black_box(f());
    (start.elapsed().as_nanos() as u64, result)
}

/// Median cost of an empty timed region: included in every figure.
pub fn timer_floor(mode: &Mode) -> Summary {
    let [floor] = sample(mode, |_| [timed(|| ()).0]);
    floor
}

/// `median [p10–p90]` in nanoseconds.
pub fn cell_ns(s: &Summary) -> String {
    format!("{} [{}–{}]", s.p50, s.p10, s.p90)
}

// ---- machine facts ----------------------------------------------------------------------

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The first value of `field` in /proc/cpuinfo.
fn cpuinfo(field: &str) -> String {
    read("/proc/cpuinfo")
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(key, _)| key.trim() == field)
        .map_or_else(|| "unknown".into(), |(_, value)| value.trim().to_string())
}

fn cpu_model() -> String {
    format!(
        "{} (family {}, model {}, {} MHz)",
        cpuinfo("model name"),
        cpuinfo("cpu family"),
        cpuinfo("model"),
        cpuinfo("cpu MHz"),
    )
}

fn logical_cpus() -> usize {
    read("/proc/cpuinfo")
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count()
}

/// The 1-, 5- and 15-minute load averages, space-separated.
pub fn load_average() -> String {
    read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Today's UTC date as `YYYY-MM-DD` (civil-from-days, proleptic Gregorian).
fn utc_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The header's date, CPU and kernel lines; `load` ends the kernel line (e.g. "load
/// average at start 0.50 0.40 0.30").
pub fn print_machine(load: &str) {
    println!("- date (UTC): {}", utc_date());
    println!(
        "- CPU: {}; {} logical CPUs, available_parallelism {}",
        cpu_model(),
        logical_cpus(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!(
        "- kernel {}, clocksource {}, {load}",
        read("/proc/sys/kernel/osrelease").trim(),
        read("/sys/devices/system/clocksource/clocksource0/current_clocksource").trim(),
    );
}
