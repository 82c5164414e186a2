//! `dynres`: run malleable jobs and change their resources while they run.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Parser, Subcommand};
use dynres_launcher::apps;
use dynres_launcher::eventlog::EventLog;
use dynres_runtime::error::LauncherError;
use dynres_runtime::{self as runtime, JobConfig};
use dynres_runtime::{hosts, tool};

/// The variables `dynres` itself reads, as every `--help` ends with them (a macro, so
/// that `concat!` can put them into `run`'s longer text).
macro_rules! environment {
    () => {
        "\
Environment:
  DYNRES_LOG          what dynres logs on stderr, a tracing filter: error, warn,
                      info (the default), debug, trace, or TARGET=LEVEL,...
  RUST_LOG            the same, read when DYNRES_LOG is unset
  DYNRES_RUNTIME_DIR  where job directories are (default: $XDG_RUNTIME_DIR/dynres,
                      else /tmp/dynres-UID); tools look for JOB there"
    };
}

/// What every `--help` ends with.
const ENVIRONMENT: &str = environment!();

/// What `dynres run --help` ends with: the ranks' environment, the exit status, and
/// [`ENVIRONMENT`].
const RUN_AFTER: &str = concat!(
    "\
Each rank starts in the caller's directory (or --wdir) with the caller's environment
plus -x settings, on every host: on other hosts less host-specific variables
(HOSTNAME, DISPLAY, SSH_*, XDG_RUNTIME_DIR, SLURM_*, …; see launcher/README.md).

Each rank's environment: DYNRES_RANK, DYNRES_SIZE (the job's size at its launch),
DYNRES_LOCAL_RANK, DYNRES_LOCAL_SIZE (ranks of the job on its node), DYNRES_NODE_ID,
DYNRES_APP, DYNRES_NAMESPACE and the runtime's connection (see launcher/README.md).

Exit status: 0 when every rank finished (exit 0 or removed by a change); else the
first failing rank's exit code, or 128 + the signal that killed it (as mpirun, which
reports the first failure; srun reports the highest); 130 when interrupted; 2 for bad
arguments; 1 when the runtime itself fails.

",
    environment!()
);

#[derive(Parser)]
#[command(
    name = "dynres",
    version,
    about = "Run malleable jobs that grow and shrink while they run",
    after_help = ENVIRONMENT
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// More log on stderr: -v debug, -vv trace (over DYNRES_LOG and RUST_LOG).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a job: `dynres run -n N [--max M] -- PROG ARGS…`.
    #[command(after_help = RUN_AFTER)]
    Run(Box<RunArgs>),
    /// Add K processes to a running job: `dynres grow JOB +K`.
    Grow {
        /// The job id (printed by `dynres run`).
        job: String,
        /// `+K`.
        #[arg(allow_hyphen_values = true)]
        count: String,
        /// Return once the request is announced or queued instead of waiting for
        /// the decision.
        #[arg(long)]
        no_wait: bool,
    },
    /// Remove K processes from a running job: `dynres shrink JOB -K`.
    Shrink {
        /// The job id.
        job: String,
        /// `-K`.
        #[arg(allow_hyphen_values = true)]
        count: String,
        /// Return once the request is announced or queued instead of waiting for
        /// the decision.
        #[arg(long)]
        no_wait: bool,
    },
    /// Replace processes of a running job: `dynres replace JOB -R +A`.
    Replace {
        /// The job id.
        job: String,
        /// `-R`: processes to remove.
        #[arg(allow_hyphen_values = true)]
        remove: String,
        /// `+A`: processes to add.
        #[arg(allow_hyphen_values = true)]
        add: String,
        /// Return once the request is announced or queued instead of waiting for
        /// the decision.
        #[arg(long)]
        no_wait: bool,
    },
    /// (Started by `dynres run` on another host through the launch agent.) One host's
    /// daemon of a job: reads the job's key from standard input.
    #[command(hide = true)]
    Daemon {
        /// The master's `host:port`.
        #[arg(long)]
        master: String,
        /// This host's node number.
        #[arg(long)]
        node: u32,
    },
    /// Processes, psets and resource changes of a running job.
    #[command(after_help = ENVIRONMENT)]
    Status {
        /// The job id.
        job: String,
        /// One JSON object with the same content as the table (processes, nodes,
        /// psets, resource changes; times in ms, absent ones `null`).
        #[arg(long)]
        json: bool,
        /// Print it again every SECONDS (default 2) until the job ends (as `watch`;
        /// with --json, one object per line).
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
    },
    /// End a running job: signal its runtime, which kills the job's processes and
    /// exits (as Ctrl-C on `dynres run` does), and wait for it.
    #[command(after_help = ENVIRONMENT)]
    Kill {
        /// The job id.
        job: String,
        /// The signal: TERM (the default), INT, HUP or QUIT end the job; KILL ends the
        /// runtime at once (its supervisor then kills the job's processes); USR1 and
        /// USR2 are forwarded to every process of the job, which goes on.
        #[arg(short, long, default_value = "TERM")]
        signal: String,
        /// Seconds to wait for the runtime to exit.
        #[arg(long, default_value_t = 30)]
        wait: u64,
    },
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell) on
    /// standard output: `dynres completions bash > ~/.local/share/bash-completion/completions/dynres`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on standard output: `dynres manpage > dynres.1`.
    Manpage,
    /// Draw a run's event log (`run --event-log LOG`) as an SVG picture: processes per
    /// host over time, each change's request and decision marked.
    Plot {
        /// The event log.
        log: std::path::PathBuf,
        /// The picture to write.
        #[arg(short, long, default_value = "run.svg")]
        out: std::path::PathBuf,
    },
    /// The running jobs of the runtime directory, one per line: job id, the runtime's
    /// pid, the job directory.
    #[command(after_help = ENVIRONMENT)]
    List,
    /// Built-in example applications (what `run --example NAME` launches). Its own
    /// `--help` is the example's, not this command's.
    #[command(hide = true, disable_help_flag = true)]
    Example {
        /// The example.
        name: String,
        /// Its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Processes to start with (`-np N` works too, as with mpirun).
    #[arg(short = 'n', long = "np")]
    n: u32,
    /// Most processes the job may grow to (sets the slots unless --slots is given).
    #[arg(long)]
    max: Option<u32>,
    /// Slots of this host (default: --max, else the number of cores).
    #[arg(long)]
    slots: Option<u32>,
    /// Processes per node: every host gets K slots (as mpirun's `-N`; srun's `-N`
    /// counts nodes instead). The same as `--map-by ppr:K:node`.
    #[arg(short = 'N', value_name = "K", conflicts_with_all = ["map_by", "slots"])]
    per_node: Option<u32>,
    /// `ppr:K:node`: K processes per node (mpirun's spelling of `-N K`).
    #[arg(long, value_name = "ppr:K:node", value_parser = ppr, conflicts_with = "slots")]
    map_by: Option<u32>,
    /// Allow more processes than slots (-n, --max and growth): every host's slots are
    /// raised evenly until they hold them (as mpirun's `--oversubscribe`).
    #[arg(long)]
    oversubscribe: bool,
    /// `core`: bind each process to one CPU of its node (local rank i on the i-th CPU
    /// the runtime may use, cycling), reported per process in the log; `none` (the
    /// default): the kernel places them.
    #[arg(long, value_enum, default_value = "none")]
    bind_to: BindArg,
    /// Write the run's events to FILE as JSON lines (job start, every change's status,
    /// every process' start and end with its node); `dynres plot FILE` draws them.
    #[arg(long, value_name = "FILE")]
    event_log: Option<std::path::PathBuf>,
    /// Tag each line of the processes' output with `[rank N] ` (the default; as
    /// mpirun's `--tag-output`).
    #[arg(long, overrides_with = "no_tag_output")]
    tag_output: bool,
    /// Show the processes' output lines as they are, untagged.
    #[arg(long)]
    no_tag_output: bool,
    /// Start each line of the processes' output with `[+S.mmm] `, the seconds since
    /// the job started (on other hosts: since their daemon started).
    #[arg(long)]
    timestamp_output: bool,
    /// Write each process' output to DIR/rank.N/stdout and DIR/rank.N/stderr instead
    /// of the terminal, untagged unless --tag-output (on every host, its own DIR; as
    /// mpirun's `--output-filename`).
    #[arg(long, value_name = "DIR")]
    output_filename: Option<std::path::PathBuf>,
    /// End the job after SECONDS (as on SIGTERM; exit status 124, as timeout(1)).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// The application's name: its pset is `mpi://app/NAME`.
    #[arg(long, default_value = "app")]
    app: String,
    /// The job id (default: the runtime's pid).
    #[arg(long)]
    job_id: Option<String>,
    /// Milliseconds a resource change may take to be decided before it is aborted.
    #[arg(long, default_value_t = 30_000)]
    change_timeout_ms: u64,
    /// Milliseconds removed processes get to exit before they are killed.
    #[arg(long, default_value_t = 5_000)]
    grace_ms: u64,
    /// Most changes queued behind the one in flight.
    #[arg(long, default_value_t = 8)]
    max_queued: usize,
    /// What a process that fails without being removed does to the job: `end` it
    /// (kill the others, exit non-zero) or let it `continue` without it.
    #[arg(long, value_enum, default_value = "end")]
    on_loss: LossArg,
    /// Publish and look up names in the data server of the running job JOB (its id, as
    /// `dynres status` takes it) instead of this job's own, so that MPI programs of the
    /// two jobs find each other (Open MPI's connect/accept, `MPI_Lookup_name`).
    #[arg(long, value_name = "JOB")]
    data_server: Option<String>,
    /// Hosts and their slots, `h1:4,h2:4` (as mpirun's `--host`). The first one that is
    /// this machine runs in this process; every other gets a daemon through the launch
    /// agent.
    #[arg(long, conflicts_with = "hostfile")]
    host: Option<String>,
    /// A file of hosts, one per line: `NAME [slots=N]` (as mpirun's `--hostfile`).
    #[arg(long)]
    hostfile: Option<String>,
    /// How daemons are started on other hosts: `CMD… HOST dynres daemon …` (default
    /// `ssh -o BatchMode=yes -o ConnectTimeout=10`; inside a Slurm allocation `srun`
    /// on the node).
    #[arg(long)]
    launch_agent: Option<String>,
    /// Inside a Slurm allocation: keep nodes a shrink emptied instead of giving them
    /// back to Slurm (`scontrol update JobId=… NodeList=…`), so that later growth can
    /// use them again.
    #[arg(long)]
    keep_nodes: bool,
    /// Inside a Slurm allocation: milliseconds a change that needs more slots than the
    /// job has waits for a second allocation (`salloc --no-shell`) before it is
    /// aborted; 0 refuses it at once.
    #[arg(long, default_value_t = 30_000)]
    grow_wait_ms: u64,
    /// Milliseconds between heartbeats of master and daemons; 10 missed ones lose a node.
    #[arg(long, default_value_t = 1_000)]
    heartbeat_ms: u64,
    /// The directory every process starts in, on every host (as mpirun's `--wdir`;
    /// it must exist on each). Default: the caller's directory, on hosts that have it.
    #[arg(long, value_name = "DIR")]
    wdir: Option<std::path::PathBuf>,
    /// Set VAR=VALUE for every process, or send the caller's VAR to other hosts even
    /// if it is one of the host-specific variables that are not sent (repeatable; as
    /// mpirun's `-x`). The rest of the caller's environment is sent anyway (as srun).
    #[arg(short = 'x', value_name = "VAR[=VALUE]", value_parser = env_setting)]
    env: Vec<runtime::forward::EnvSetting>,
    /// Run a built-in example (`synthetic`) instead of PROG; the arguments after `--`
    /// go to it (`-- --help` prints its own help).
    #[arg(long)]
    example: Option<String>,
    /// The program and its arguments, as mpirun takes them: everything from the first
    /// word that is not an option of `dynres run` is the program's (`--` before it
    /// works too, and is needed for a program whose name starts with `-`).
    #[arg(trailing_var_arg = true, value_name = "PROG")]
    command: Vec<String>,
}

/// Where a job runs: hosts, launch agent, and the Slurm job to give emptied nodes back to.
struct Placement {
    hosts: Vec<hosts::Host>,
    agent: Vec<String>,
    give_back: Option<String>,
    /// Inside Slurm: how long a change short of slots waits for a second allocation.
    grow_wait: Option<Duration>,
}

/// The job's hosts and launch agent: `--host`, `--hostfile`, else the Slurm allocation
/// (`SLURM_JOB_NODELIST`), else this host alone (no hosts).
fn hosts_of(args: &RunArgs) -> Result<Placement, LauncherError> {
    let usage = |e: hosts::HostsError| LauncherError::Usage(e.to_string());
    let mut agent = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
        .map(String::from)
        .to_vec();
    let mut slurm_job = None;
    let hosts = if let Some(h) = &args.host {
        hosts::parse_host_arg(h).map_err(usage)?
    } else if let Some(f) = &args.hostfile {
        hosts::read_hostfile(f).map_err(usage)?
    } else if let Some(h) = hosts::from_slurm_env(|k| std::env::var(k).ok()) {
        // Inside an allocation: daemons are job steps on their node.
        agent = ["srun", "--nodes=1", "--ntasks=1", "--overlap", "--nodelist"]
            .map(String::from)
            .to_vec();
        slurm_job = std::env::var("SLURM_JOB_ID").ok();
        h.map_err(usage)?
    } else {
        Vec::new()
    };
    if let Some(a) = &args.launch_agent {
        agent = a.split_whitespace().map(String::from).collect();
        if agent.is_empty() {
            return Err(LauncherError::Usage("--launch-agent is empty".into()));
        }
    }
    // RC-21, GROW-1: only a resource manager can grant more nodes.
    let grow_wait = slurm_job
        .as_ref()
        .filter(|_| args.grow_wait_ms > 0)
        .map(|_| Duration::from_millis(args.grow_wait_ms));
    // RC-20: nodes a shrink empties go back to Slurm unless kept.
    let give_back = slurm_job.filter(|_| !args.keep_nodes);
    Ok(Placement {
        hosts,
        agent,
        give_back,
        grow_wait,
    })
}

/// `-x VAR[=VALUE]`, checked by clap (a bad one is an argument error).
fn env_setting(s: &str) -> Result<runtime::forward::EnvSetting, String> {
    runtime::forward::EnvSetting::parse(s)
}

/// `ppr:K:node` → K.
fn ppr(s: &str) -> Result<u32, String> {
    s.strip_prefix("ppr:")
        .and_then(|r| r.strip_suffix(":node"))
        .and_then(|k| k.parse::<u32>().ok())
        .filter(|k| *k > 0)
        .ok_or_else(|| format!("{s}: only ppr:K:node (K processes per node) is supported"))
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BindArg {
    None,
    Core,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LossArg {
    End,
    Continue,
}

/// Sends a change command and prints the job's answer: the final outcome unless
/// `--no-wait` (then: announced or queued). While it waits, says so on stderr every
/// few seconds.
fn change(job: &str, line: &str, no_wait: bool) -> Result<ExitCode, LauncherError> {
    let what = line.to_string();
    let line = if no_wait {
        format!("{line} nowait")
    } else {
        line.to_string()
    };
    let answer = tool::command_with_progress(job, &line, |waited| {
        eprintln!(
            "dynres: job {job}: {what}: waiting for the decision ({} s)",
            waited.as_secs()
        );
    })?;
    println!("{}", answer.trim());
    Ok(ExitCode::SUCCESS)
}

fn count(s: &str, sign: char, what: &str) -> Result<u32, LauncherError> {
    let digits = s.strip_prefix(sign).unwrap_or(s);
    match digits.parse::<u32>() {
        // No job has more slots than core's bound: a larger count is refused here,
        // before the job is asked (which would refuse it too, `RC-2`).
        Ok(k) if u64::from(k) > dynres_core::rc::master::MAX_SLOTS => {
            Err(LauncherError::Usage(format!(
                "{what} {s} exceeds the most slots a job can have ({})",
                dynres_core::rc::master::MAX_SLOTS
            )))
        }
        Ok(k) if k > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => Ok(k),
        _ => Err(LauncherError::Usage(format!(
            "{what} must be a positive number like {sign}2, not {s:?}"
        ))),
    }
}

fn run(args: RunArgs) -> Result<ExitCode, LauncherError> {
    // Counts that size tables: refuse absurd ones before anything is allocated.
    for (flag, v) in [
        ("-n", Some(args.n)),
        ("--max", args.max),
        ("--slots", args.slots),
    ] {
        if let Some(v) = v.filter(|v| *v > runtime::MAX_PROCS) {
            return Err(LauncherError::Usage(format!(
                "{flag} {v} is too large (at most {})",
                runtime::MAX_PROCS
            )));
        }
    }
    if let Some(name) = &args.example {
        // Printed once, here, instead of by every rank of a job started for nothing.
        if apps::asks_for_help(name, &args.command) {
            return Ok(apps::run_example(name, &args.command));
        }
    }
    let (program, rest) = match &args.example {
        Some(name) => {
            apps::validate(name, &args.command)
                .map_err(|e| LauncherError::Usage(format!("--example {name}: {e}")))?;
            let exe = std::env::current_exe()
                .map_err(|e| LauncherError::io("find the dynres executable", e))?;
            let mut rest = vec!["example".to_string(), name.clone()];
            rest.extend(args.command.iter().cloned());
            (exe.display().to_string(), rest)
        }
        None => match args.command.split_first() {
            Some((p, rest)) => (p.clone(), rest.to_vec()),
            None => {
                return Err(LauncherError::Usage(
                    "nothing to run: give `-- PROG ARGS…` or `--example synthetic`".into(),
                ));
            }
        },
    };
    if let Some(m) = args.max {
        if m < args.n {
            return Err(LauncherError::Usage(format!(
                "--max {m} is below -n {}",
                args.n
            )));
        }
    }
    let per_node = args.per_node.or(args.map_by);
    if per_node == Some(0) {
        return Err(LauncherError::Usage(
            "-N 0: at least one process per node".into(),
        ));
    }
    let mut slots = per_node
        .or(args.slots)
        .or(args.max)
        .unwrap_or_else(runtime::cores);
    let Placement {
        mut hosts,
        agent,
        give_back,
        grow_wait,
    } = hosts_of(&args)?;
    if let Some(k) = per_node {
        for h in &mut hosts {
            h.slots = k;
        }
    }
    if args.oversubscribe {
        oversubscribe(&mut slots, &mut hosts, args.n.max(args.max.unwrap_or(0)));
    }
    // Absolute, so that other hosts' daemons (started elsewhere) write where meant.
    let output_dir = match &args.output_filename {
        Some(d) => Some(
            std::env::current_dir()
                .map_err(|e| LauncherError::io("read the working directory", e))?
                .join(d),
        ),
        None => None,
    };
    let timeout = match args.timeout {
        None => None,
        Some(t) if t.is_finite() && t > 0.0 && t <= 1e9 => Some(Duration::from_secs_f64(t)),
        Some(t) => {
            return Err(LauncherError::Usage(format!(
                "--timeout {t}: a positive number of seconds"
            )));
        }
    };
    if args.heartbeat_ms == 0 || args.heartbeat_ms > 60_000 {
        return Err(LauncherError::Usage(
            "--heartbeat-ms must be 1..=60000".into(),
        ));
    }
    let exe =
        std::env::current_exe().map_err(|e| LauncherError::io("find the dynres executable", e))?;
    let outcome = runtime::run(JobConfig {
        hosts,
        agent: runtime::Agent {
            command: agent,
            exe,
        },
        heartbeat: Duration::from_millis(args.heartbeat_ms),
        give_back,
        grow_wait,
        n: args.n,
        slots,
        program,
        args: rest,
        app: args.app,
        job_id: args.job_id,
        change_timeout: Duration::from_millis(args.change_timeout_ms),
        grace: Duration::from_millis(args.grace_ms),
        max_queued: args.max_queued,
        wdir: args.wdir,
        env: args.env,
        timeout,
        output: runtime::output::OutputStyle {
            // Files hold one rank's lines each: untagged unless asked for.
            tag: args.tag_output || (!args.no_tag_output && output_dir.is_none()),
            timestamp: args.timestamp_output,
            dir: output_dir,
        },
        bind: match args.bind_to {
            BindArg::None => runtime::bind::Bind::None,
            BindArg::Core => runtime::bind::Bind::Core,
        },
        on_loss: match args.on_loss {
            LossArg::End => runtime::OnLoss::EndJob,
            LossArg::Continue => runtime::OnLoss::Continue,
        },
        data_server: args.data_server.clone(),
    })?;
    let status = outcome.exit_status();
    if outcome.timed_out {
        eprintln!(
            "dynres: job timed out after {} s; its processes were killed (exit status {status})",
            args_timeout_secs(timeout)
        );
    } else if outcome.interrupted {
        eprintln!("dynres: job interrupted");
    } else if let Some(why) = &outcome.ended {
        eprintln!(
            "dynres: job failed: {why}; the other processes were killed (exit status {status})"
        );
    } else if !outcome.failed.is_empty() {
        eprintln!(
            "dynres: job failed: lost ranks {:?} (exit status {status}, the first one's)",
            outcome.failed
        );
    }
    Ok(ExitCode::from(status))
}

fn args_timeout_secs(t: Option<Duration>) -> f64 {
    t.map_or(0.0, |t| t.as_secs_f64())
}

/// `--oversubscribe`: raises slots until `need` processes fit — this host's `slots`
/// on one host, else every host's evenly (never lowering one).
fn oversubscribe(slots: &mut u32, hosts: &mut [hosts::Host], need: u32) {
    if hosts.is_empty() {
        *slots = (*slots).max(need);
        return;
    }
    let total: u64 = hosts.iter().map(|h| u64::from(h.slots)).sum();
    if total >= u64::from(need) {
        return;
    }
    let each = need.div_ceil(u32::try_from(hosts.len()).unwrap_or(u32::MAX));
    for h in hosts {
        h.slots = h.slots.max(each);
    }
}

/// mpirun's single-dash spellings of options `dynres run` has, rewritten to clap's
/// before parsing (`-np 4` would otherwise read as `-n p`).
const SINGLE_DASH: &[(&str, &str)] = &[
    ("-np", "--np"),
    ("-host", "--host"),
    ("-hostfile", "--hostfile"),
    ("-wdir", "--wdir"),
    ("-oversubscribe", "--oversubscribe"),
    ("-timeout", "--timeout"),
    ("-tag-output", "--tag-output"),
    ("-timestamp-output", "--timestamp-output"),
    ("-output-filename", "--output-filename"),
];

/// `argv` with [`SINGLE_DASH`] spellings rewritten in `run`'s options (never after
/// `--`: those are the program's).
fn mpirun_spellings(mut argv: Vec<OsString>) -> Vec<OsString> {
    if argv.get(1).is_none_or(|a| a != "run") {
        return argv;
    }
    for a in argv.iter_mut().skip(2) {
        if a == "--" {
            break;
        }
        let Some(text) = a.to_str() else { continue };
        for (short, long) in SINGLE_DASH {
            if let Some(rest) = text.strip_prefix(short) {
                if rest.is_empty() || rest.starts_with('=') {
                    *a = format!("{long}{rest}").into();
                    break;
                }
            }
        }
    }
    argv
}

/// `s` as a shell word, for a command line the user can paste.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A tip for `dynres run … --example NAME ARGS` without `--`: the line as it should
/// have been. (A program's options need no `--`: everything from the program on is
/// its own, as with mpirun.)
fn dashdash_tip(e: &clap::Error, argv: &[OsString]) -> Option<String> {
    if e.kind() != ErrorKind::UnknownArgument || argv.get(1).is_none_or(|a| a != "run") {
        return None;
    }
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let words: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let at = words.iter().skip(2).position(|w| w == bad)? + 2;
    let example = words[2..at].iter().any(|w| w == "--example");
    if bad.starts_with('-') && !example {
        return None;
    }
    let quote = |ws: &[String]| {
        ws.iter()
            .map(|w| shell_word(w))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let what = if example {
        "the example's arguments"
    } else {
        "the program and its arguments"
    };
    Some(format!(
        "put `--` before {what}: dynres run {} -- {}",
        quote(&words[2..at]),
        quote(&words[at..])
    ))
}

/// Prints a clap error in full (its hints included: the missing arguments, "a
/// similar argument exists", tips), as one error led by `dynres: `, and returns exit
/// status 2; help and version go to stdout with status 0.
fn argument_error(mut e: clap::Error, argv: &[OsString]) -> ExitCode {
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if let Some(tip) = dashdash_tip(&e, argv) {
        // Replaces clap's own tip (`to pass '--x' as a value, use '-- --x'`), which
        // names only the one argument.
        e.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    let text = e.to_string();
    let text = text.trim_end();
    eprintln!("dynres: {}", text.strip_prefix("error: ").unwrap_or(text));
    ExitCode::from(2)
}

/// `dynres status JOB [--json] [--watch [S]]`: once, or every `S` seconds until the
/// job ends (then exit status 0, with a last line saying so).
fn status(job: &str, json: bool, watch: Option<f64>) -> Result<ExitCode, LauncherError> {
    let line = if json { "status json" } else { "status" };
    let Some(every) = watch else {
        print!("{}", tool::command(job, line)?);
        return Ok(ExitCode::SUCCESS);
    };
    if !(every.is_finite() && (0.1..=86_400.0).contains(&every)) {
        return Err(LauncherError::Usage(format!(
            "--watch {every}: seconds between 0.1 and 86400"
        )));
    }
    let mut first = true;
    loop {
        match tool::command(job, line) {
            Ok(answer) => {
                if !json {
                    // A separator with the time, as `watch` prints a header.
                    let secs = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    println!("--- job {job} at {} (unix time) ---", secs);
                }
                print!("{answer}");
                use std::io::Write;
                let _ = std::io::stdout().flush();
            }
            // The job ended while watched: that is the end of the watch, not an error.
            Err(LauncherError::NoSuchJob { .. }) if !first => {
                eprintln!("dynres: job {job} has ended");
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => return Err(e),
        }
        first = false;
        std::thread::sleep(Duration::from_secs_f64(every));
    }
}

/// `dynres kill JOB [-s SIG] [--wait S]`.
fn kill(job: &str, signal: &str, wait: u64) -> Result<ExitCode, LauncherError> {
    let name = signal.trim_start_matches("SIG").to_ascii_uppercase();
    let sig = match name.as_str() {
        "TERM" | "15" => libc::SIGTERM,
        "INT" | "2" => libc::SIGINT,
        "HUP" | "1" => libc::SIGHUP,
        "QUIT" | "3" => libc::SIGQUIT,
        "USR1" | "10" => libc::SIGUSR1,
        "USR2" | "12" => libc::SIGUSR2,
        // The runtime dies at once; its supervisor then kills what it left (RT-4).
        "KILL" | "9" => libc::SIGKILL,
        _ => {
            return Err(LauncherError::Usage(format!(
                "--signal {signal}: one of TERM, INT, HUP, QUIT, KILL, USR1, USR2"
            )));
        }
    };
    let forwarded = sig == libc::SIGUSR1 || sig == libc::SIGUSR2;
    let wait = if forwarded {
        Duration::ZERO
    } else {
        Duration::from_secs(wait)
    };
    match tool::kill_job(job, sig, wait)? {
        _ if forwarded => {
            eprintln!("dynres: job {job}: SIG{name} sent to its processes");
            Ok(ExitCode::SUCCESS)
        }
        tool::Killed::Ended => {
            eprintln!("dynres: job {job} ended");
            Ok(ExitCode::SUCCESS)
        }
        tool::Killed::StillRunning => Err(LauncherError::Refused(format!(
            "job {job} got SIG{name} but still runs after {} s",
            wait.as_secs()
        ))),
    }
}

/// Writes generated text to stdout; a reader that stopped early (`| head`) is not an
/// error.
fn to_stdout(text: &[u8], what: &str) -> Result<ExitCode, LauncherError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(LauncherError::io(format!("write {what}"), e))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// `dynres list`: one line per running job; a note on stderr when there is none, so
/// that an empty list says where it looked.
fn list() -> Result<ExitCode, LauncherError> {
    let (root, origin) = dynres_client::env::runtime_root_and_origin();
    let jobs = runtime::live_jobs(&root)?;
    if jobs.is_empty() {
        eprintln!("dynres: no running job in {} ({origin})", root.display());
    }
    for j in jobs {
        let pid = j.pid.map_or("-".into(), |p| p.to_string());
        println!("{} {pid} {}", j.id, j.dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let argv = mpirun_spellings(std::env::args_os().collect());
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => return argument_error(e, &argv),
    };
    if !matches!(cli.cmd, Cmd::Example { .. }) {
        use tracing_subscriber::Layer;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let directives = match cli.verbose {
            0 => dynres_client::env::log_directives(|k| std::env::var(k).ok()),
            1 => Some("debug".to_string()),
            _ => Some("trace".to_string()),
        };
        let filter = directives
            .and_then(|d| tracing_subscriber::EnvFilter::try_new(d).ok())
            .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"))
            // Run events go to --event-log only.
            .add_directive(
                format!("{}=off", dynres_runtime::events::TARGET)
                    .parse()
                    .expect("a valid directive"),
            );
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_target(false)
            .with_filter(filter);
        // DYNRES_TRACE_FILE: the master process records to PATH, daemons to PATH.<pid>.
        let master = matches!(cli.cmd, Cmd::Run(_));
        let events = match &cli.cmd {
            Cmd::Run(a) => match a.event_log.as_deref().map(EventLog::create) {
                Some(Ok(l)) => Some(l.layer()),
                Some(Err(e)) => {
                    eprintln!("dynres: cannot create the event log: {e}");
                    return ExitCode::from(2);
                }
                None => None,
            },
            _ => None,
        };
        tracing_subscriber::registry()
            .with(log)
            .with(dynres_launcher::tracelayer::layer_from_env(master))
            .with(events)
            .init();
    }
    let r = match cli.cmd {
        Cmd::Run(a) => run(*a),
        Cmd::Daemon { master, node } => runtime::daemon(&master, node).map(|o| match o.ended {
            Some(why) => {
                eprintln!("dynres daemon (node {node}): {why}");
                ExitCode::FAILURE
            }
            None => ExitCode::SUCCESS,
        }),
        Cmd::Grow {
            job,
            count: k,
            no_wait,
        } => count(&k, '+', "the count").and_then(|k| change(&job, &format!("grow {k}"), no_wait)),
        Cmd::Shrink {
            job,
            count: k,
            no_wait,
        } => {
            count(&k, '-', "the count").and_then(|k| change(&job, &format!("shrink {k}"), no_wait))
        }
        Cmd::Replace {
            job,
            remove,
            add,
            no_wait,
        } => count(&remove, '-', "the processes to remove")
            .and_then(|r| count(&add, '+', "the processes to add").map(|a| (r, a)))
            .and_then(|(r, a)| change(&job, &format!("replace {r} {a}"), no_wait)),
        Cmd::Status { job, json, watch } => status(&job, json, watch),
        Cmd::Kill { job, signal, wait } => kill(&job, &signal, wait),
        Cmd::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "dynres",
                &mut text,
            );
            to_stdout(&text, "the completion script")
        }
        Cmd::Plot { log, out } => dynres_launcher::plot::read(&log)
            .and_then(|run| dynres_launcher::plot::draw(&run, &out))
            .map(|()| {
                eprintln!("dynres: wrote {}", out.display());
                ExitCode::SUCCESS
            })
            .map_err(|e| LauncherError::Usage(e.to_string())),
        Cmd::Manpage => {
            let mut text = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut text)
                .map_err(|e| LauncherError::io("render the man page", e))
                .and_then(|()| to_stdout(&text, "the man page"))
        }
        Cmd::List => list(),
        Cmd::Example { name, args } => Ok(apps::run_example(&name, &args)),
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dynres: {e}");
            if e.is_usage() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
