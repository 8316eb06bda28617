//! Command-line flags, parsed by hand to keep the demo free of dependencies.

use std::str::FromStr;

/// Which backend to create the pool on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Host memory: a `kvpool::Pool` (the default).
    Host,
    /// CUDA device 0: a `kvpool::cuda::DevicePool`, every call checked against a host pool
    /// (needs an NVIDIA GPU and driver; refused with exit status 2 without them).
    Cuda,
}

/// The waiting-queue order (`kvpool::admission::Policy`, named as SGLang's
/// `--schedule-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyName {
    /// First come, first served.
    Fcfs,
    /// Longest output first.
    Lof,
    /// Longest cached prefix first.
    Lpm,
    /// Seeded shuffle.
    Random,
    /// DFS over the prefix tree, heavier subtrees first.
    DfsWeight,
}

impl PolicyName {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fcfs => "fcfs",
            Self::Lof => "lof",
            Self::Lpm => "lpm",
            Self::Random => "random",
            Self::DfsWeight => "dfs-weight",
        }
    }
}

/// Everything the demo can be told.
#[derive(Clone, Debug)]
pub struct Args {
    /// Tokens per page.
    pub page_size: u32,
    /// Usable token slots of the pool.
    pub size: u64,
    /// Requests in the synthetic stream.
    pub requests: usize,
    /// Seed of the workload generator (and of the random policy).
    pub seed: u64,
    /// `chunked_prefill_size`, or `None` for no chunked prefill.
    pub chunk: Option<u64>,
    /// Mix running requests' decode rows into prefill steps.
    pub mixed_chunk: bool,
    /// Waiting-queue order.
    pub policy: PolicyName,
    /// At most this many running requests.
    pub max_running: Option<usize>,
    /// Chunked prefills in flight at once.
    pub max_chunked: usize,
    /// Priority scheduling with preemption (threshold 10).
    pub priority: bool,
    /// Mean arrivals per step.
    pub rate: f64,
    /// Longest prompt (own part, without a system prompt).
    pub max_prompt: u32,
    /// Median output length.
    pub output_median: f64,
    /// Longest output.
    pub max_output: u32,
    /// Share of benchmark-style (`ignore_eos`) requests.
    pub ignore_eos: f64,
    /// Shared system prompts kept in a pinned prefix cache.
    pub shared_prefixes: usize,
    /// Share of requests larger than the pool.
    pub oversized: f64,
    /// Stage frees and merge them sorted (PD-disaggregation mode).
    pub need_sort: bool,
    /// Where the pool lives.
    pub backend: Backend,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            page_size: 16,
            size: 262_144,
            requests: 2000,
            seed: 42,
            chunk: Some(4096),
            mixed_chunk: false,
            policy: PolicyName::Fcfs,
            max_running: None,
            max_chunked: 1,
            priority: false,
            rate: 1.5,
            max_prompt: 16384,
            output_median: 200.0,
            max_output: 2048,
            ignore_eos: 0.5,
            shared_prefixes: 4,
            oversized: 0.002,
            need_sort: false,
            backend: Backend::Host,
        }
    }
}

/// What the command line asked for.
pub enum Command {
    /// Run the demo.
    Run(Args),
    /// Print the usage text and exit successfully.
    Help,
}

/// The usage text printed by `--help` (and after a bad flag).
pub fn usage() -> String {
    let d = Args::default();
    format!(
        "kvpool demo: a serving loop driving kvpool's Scheduler and Pool on a synthetic load

usage: cargo run --release --example demo -- [flags]

pool
  --page-size N         tokens per page; 1 gives a token pool      (default {})
  --size N              usable token slots of the pool             (default {})
  --need-sort           stage frees and merge them sorted (PD mode)
  --backend host|cuda   host: a Pool in host memory; cuda: a DevicePool on
                        GPU 0, every call checked against a host pool
                        (needs an NVIDIA GPU and driver)           (default host)
scheduler (kvpool::admission::SchedulerConfig; SGLang defaults otherwise)
  --chunk N|off         chunked_prefill_size (SGLang: 8192 on H200) (default {})
  --mixed-chunk         mix decode rows into prefill steps
  --policy P            fcfs | lof | lpm | random | dfs-weight     (default {})
  --max-running N       max_running_requests                       (default unlimited)
  --max-chunked N       chunked prefills in flight at once         (default {})
  --priority            priority scheduling, preemption threshold 10
workload
  --requests N          requests in the synthetic stream           (default {})
  --seed N              workload seed; same seed, same run         (default {})
  --rate X              mean request arrivals per step (Poisson)   (default {})
  --max-prompt N        a prompt's own part is clipped to N tokens (default {})
  --output-median N     median output length (log-normal)          (default {})
  --max-output N        outputs are clipped to N tokens            (default {})
  --ignore-eos X        share of benchmark-style requests (ignore_eos,
                        max_new_tokens = output); the rest are chat
                        requests (max_new_tokens 256..2048, EOS)   (default {})
  --shared-prefixes N   shared system prompts held in a pinned prefix cache;
                        0: no prefix cache                         (default {})
  --oversized X         share of requests larger than the pool     (default {})
  -h, --help            print this text

Exit status: 0 when the run completes and every check holds, 1 when a check fails,
2 for a bad flag or configuration, or --backend cuda without a usable GPU.",
        d.page_size,
        d.size,
        d.chunk.map_or("off".to_string(), |c| c.to_string()),
        d.policy.as_str(),
        d.max_chunked,
        d.requests,
        d.seed,
        d.rate,
        d.max_prompt,
        d.output_median,
        d.max_output,
        d.ignore_eos,
        d.shared_prefixes,
        d.oversized
    )
}

/// Parses `args` (without the program name). Accepts `--flag value` and `--flag=value`.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut out = Args::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--page-size" => out.page_size = number(&flag, &value()?)?,
            "--size" => out.size = number(&flag, &value()?)?,
            "--requests" => out.requests = number(&flag, &value()?)?,
            "--seed" => out.seed = number(&flag, &value()?)?,
            "--chunk" => {
                out.chunk = match value()?.as_str() {
                    "off" | "none" => None,
                    text => Some(number(&flag, text)?),
                }
            }
            "--mixed-chunk" => out.mixed_chunk = true,
            "--policy" => {
                out.policy = match value()?.as_str() {
                    "fcfs" => PolicyName::Fcfs,
                    "lof" => PolicyName::Lof,
                    "lpm" => PolicyName::Lpm,
                    "random" => PolicyName::Random,
                    "dfs-weight" => PolicyName::DfsWeight,
                    other => {
                        return Err(format!(
                            "--policy must be fcfs, lof, lpm, random or dfs-weight, not {other:?}"
                        ))
                    }
                }
            }
            "--max-running" => out.max_running = Some(number(&flag, &value()?)?),
            "--max-chunked" => out.max_chunked = number(&flag, &value()?)?,
            "--priority" => out.priority = true,
            "--rate" => out.rate = number(&flag, &value()?)?,
            "--max-prompt" => out.max_prompt = number(&flag, &value()?)?,
            "--output-median" => out.output_median = number(&flag, &value()?)?,
            "--max-output" => out.max_output = number(&flag, &value()?)?,
            "--ignore-eos" => out.ignore_eos = number(&flag, &value()?)?,
            "--shared-prefixes" => out.shared_prefixes = number(&flag, &value()?)?,
            "--oversized" => out.oversized = number(&flag, &value()?)?,
            "--need-sort" => out.need_sort = true,
            "--backend" => {
                out.backend = match value()?.as_str() {
                    "host" => Backend::Host,
                    "cuda" => Backend::Cuda,
                    other => return Err(format!("--backend must be host or cuda, not {other:?}")),
                }
            }
            _ => return Err(format!("unknown flag {flag:?}")),
        }
    }
    validate(&out)?;
    Ok(Command::Run(out))
}

fn number<T: FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{flag}: {text:?} is not a valid number"))
}

/// Rejects settings the workload generator cannot use. The pool validates `size` and
/// `page_size`, the scheduler its own settings (the demo shows their errors), and requests
/// too large for the pool are the scheduler's to refuse.
fn validate(args: &Args) -> Result<(), String> {
    if args.requests == 0 || args.max_prompt == 0 || args.max_output == 0 {
        return Err("--requests, --max-prompt and --max-output must be positive".into());
    }
    if args.requests > u32::MAX as usize - 16 {
        return Err("--requests is too large".into());
    }
    if !(args.output_median >= 1.0 && args.output_median <= 1e6) {
        return Err("--output-median must be in [1, 1e6]".into());
    }
    if !(args.rate > 0.0 && args.rate <= 100.0) {
        return Err("--rate must be in (0, 100]".into());
    }
    if !(0.0..=1.0).contains(&args.oversized) || !(0.0..=1.0).contains(&args.ignore_eos) {
        return Err("--oversized and --ignore-eos must be in [0, 1]".into());
    }
    if args.shared_prefixes > 16 {
        return Err("--shared-prefixes must be at most 16".into());
    }
    Ok(())
}
