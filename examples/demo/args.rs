//! Command-line flags, parsed by hand to keep the demo free of dependencies.

use std::str::FromStr;

/// Which backend to create the pool on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Host memory (the only backend of this build).
    Host,
    /// CUDA device 0 (expected to be refused with `Unsupported` by this build).
    Cuda,
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
    /// Seed of the workload generator.
    pub seed: u64,
    /// Prefill tokens per step, across the batch (chunked prefill).
    pub chunk: u64,
    /// Mean arrivals per step.
    pub rate: f64,
    /// Longest prompt.
    pub max_prompt: u32,
    /// Longest output.
    pub max_output: u32,
    /// Stage frees and merge them sorted (PD-disaggregation mode).
    pub need_sort: bool,
    /// Admission also reserves a decaying share of running requests' remaining output.
    pub new_token_ratio: bool,
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
            chunk: 4096,
            rate: 1.5,
            max_prompt: 8192,
            max_output: 2048,
            need_sort: false,
            new_token_ratio: false,
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
        "kvpool demo: a continuous-batching scheduler driving a kvpool Pool on a synthetic load

usage: cargo run --release --example demo -- [flags]

  --page-size N       tokens per page; 1 gives a token pool        (default {})
  --size N            usable token slots of the pool               (default {})
  --requests N        requests in the synthetic stream             (default {})
  --seed N            workload seed; same seed, same run           (default {})
  --chunk N           prefill tokens per step across the batch     (default {})
  --rate X            mean request arrivals per step (Poisson)     (default {})
  --max-prompt N      prompt lengths are clipped to N tokens       (default {})
  --max-output N      output lengths are clipped to N tokens       (default {})
  --need-sort         stage frees and merge them sorted (PD mode)
  --new-token-ratio   admission also reserves SGLang's decaying share of running
                      requests' remaining output (fewer retractions, longer queues);
                      default: reserve only what the next decode step needs
  --backend host|cuda pool backend; cuda is refused by this build  (default host)
  -h, --help          print this text

Exit status: 0 when the run completes and every check holds, 1 when a check fails,
2 for a bad flag or an unavailable backend.",
        d.page_size, d.size, d.requests, d.seed, d.chunk, d.rate, d.max_prompt, d.max_output
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
            "--chunk" => out.chunk = number(&flag, &value()?)?,
            "--rate" => out.rate = number(&flag, &value()?)?,
            "--max-prompt" => out.max_prompt = number(&flag, &value()?)?,
            "--max-output" => out.max_output = number(&flag, &value()?)?,
            "--need-sort" => out.need_sort = true,
            "--new-token-ratio" => out.new_token_ratio = true,
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

/// Rejects settings under which the demo could not make progress. The pool itself
/// validates `size` and `page_size` (and the demo shows its error if they are wrong).
fn validate(args: &Args) -> Result<(), String> {
    if args.requests == 0 || args.chunk == 0 || args.max_prompt == 0 || args.max_output == 0 {
        return Err("--requests, --chunk, --max-prompt and --max-output must be positive".into());
    }
    if !(args.rate > 0.0 && args.rate <= 100.0) {
        return Err("--rate must be in (0, 100]".into());
    }
    // One request alone must always fit, whatever the page rounding: otherwise it could
    // neither be admitted nor decoded, and the run would livelock.
    let ps = u64::from(args.page_size.max(1));
    let longest = u64::from(args.max_prompt) + u64::from(args.max_output);
    if longest.div_ceil(ps) * ps + 2 * ps > args.size {
        return Err(format!(
            "--size {} cannot hold one request of {} prompt + {} output tokens; raise --size or lower the maxima",
            args.size, args.max_prompt, args.max_output
        ));
    }
    Ok(())
}
