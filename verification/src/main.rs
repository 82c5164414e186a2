//! `dynres-verification`: the merge gate (`spec/verification.md`).
//!
//! `cargo verify check [--tier pr|nightly] [--json FILE] [--bless] [--explain]`

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use dynres_verification::models::{nightly_configs, pr_configs};
use dynres_verification::planted::{Hunt, corpus, hunt, unplanted};
use dynres_verification::run::{Outcome, check, check_fair, check_spawn};
use dynres_verification::{
    ends_model, giveback_model, golden, liveness_model, names_model, pool, pset_model,
    spawn_configs, spawn_mpi_model,
};

/// The checker allocates and frees one state per transition; glibc's malloc took about a
/// third of its time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Model-check dynres' kernel before merging a protocol change")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Tier {
    Pr,
    Nightly,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check every configuration of a tier; non-zero exit on any failure.
    Check {
        #[arg(long, value_enum, default_value = "pr")]
        tier: Tier,
        /// Also write the results as JSON.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Only configurations whose name contains this.
        #[arg(long)]
        only: Option<String>,
        /// Instead of checking, serve stateright's Explorer for this configuration on
        /// 127.0.0.1:3000.
        #[arg(long, value_name = "CONFIG")]
        explore: Option<String>,
        /// Rewrite the golden state counts from this run (commit the diff with the change).
        #[arg(long)]
        bless: bool,
        /// Threads (default: every core). Several configurations are checked at once, one
        /// thread each; a lone configuration gets them all. State counts are the same with
        /// any number.
        #[arg(long, default_value_t = cores())]
        threads: usize,
        /// Print the counterexample of every caught planted bug.
        #[arg(long)]
        verbose: bool,
        /// Instead of checking, print every configuration's properties and the planted
        /// bugs run against it (what its golden count still guarantees).
        #[arg(long)]
        explain: bool,
    },
    /// Record a trace of the in-memory harnesses' resource-change and spawn flows to FILE.
    Record {
        /// Where to write the trace.
        file: std::path::PathBuf,
    },
    /// Replay recorded traces against fresh kernel machines; non-zero exit if any
    /// transition's outputs or state differ. Each file is one process's trace (e.g.
    /// `DYNRES_TRACE_FILE` and its `.<pid>` siblings of a launcher run).
    Replay {
        /// The traces.
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
    },
    /// Serve stateright's Explorer for one configuration on 127.0.0.1:3000.
    Explore {
        /// Configuration name.
        config: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check {
            tier,
            json,
            only,
            verbose,
            threads,
            bless,
            explain,
            explore: Some(config),
        } => {
            let _ = (tier, json, only, verbose, threads, bless, explain);
            explore(&config)
        }
        Cmd::Check {
            tier,
            only,
            explain: true,
            ..
        } => {
            let nightly = matches!(tier, Tier::Nightly);
            for line in dynres_verification::coverage::explain(only.as_deref(), nightly) {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Cmd::Check {
            tier,
            json,
            only,
            verbose,
            threads,
            bless,
            explain: false,
            explore: None,
        } => run_check(tier, json, only, verbose, threads, bless),
        Cmd::Record { file } => {
            let lines = dynres_verification::record::record_scenarios();
            match std::fs::write(&file, lines.join("\n") + "\n") {
                Ok(()) => {
                    println!("recorded {} transitions to {}", lines.len(), file.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("dynres-verification: cannot write {}: {e}", file.display());
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Replay { files } => replay_files(&files),
        Cmd::Explore { config } => explore(&config),
    }
}

/// Replays each file on its own (machine ids are unique per process) and prints the
/// lines and transitions replayed per role.
fn replay_files(files: &[std::path::PathBuf]) -> ExitCode {
    let mut all = dynres_verification::trace::Replayed::default();
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("dynres-verification: cannot read {}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        match dynres_verification::trace::replay(&text) {
            Ok(r) => {
                println!(
                    "{}: {} lines replayed identically",
                    file.display(),
                    r.total_lines()
                );
                all.add(&r);
            }
            Err(d) => {
                eprintln!(
                    "dynres-verification: not conformant: {}: {d}",
                    file.display()
                );
                return ExitCode::FAILURE;
            }
        }
    }
    for (role, n) in &all.lines {
        println!(
            "  {role:<16} {n:>8} lines, {:>8} transitions",
            all.transitions_of(role)
        );
    }
    let n = all.total_lines();
    println!("conformant: {n}/{n} lines replayed identically");
    ExitCode::SUCCESS
}

/// The cores this process may use (1 if unknown).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn run_check(
    tier: Tier,
    json: Option<std::path::PathBuf>,
    only: Option<String>,
    verbose: bool,
    threads: usize,
    bless: bool,
) -> ExitCode {
    let max_states = match tier {
        // Generated states (revisits included): what stateright's bound counts.
        Tier::Pr => 60_000_000,
        Tier::Nightly => 600_000_000,
    };
    println!(
        "{:<28} {:>12} {:>6} {:>9}  result",
        "config", "states", "depth", "seconds"
    );
    let configs = match tier {
        Tier::Pr => pr_configs(),
        Tier::Nightly => pr_configs().into_iter().chain(nightly_configs()).collect(),
    };
    // One list of (name, how to check it) across the model families; weighed by their
    // golden counts so the pool starts the longest first (unknown ones count as longest).
    let weights = golden::weights();
    let weight = |name: &str| weights.get(name).map_or(u64::MAX, |&n| n as u64);
    let mut jobs: Vec<pool::Job<'static, Outcome>> = Vec::new();
    let mut add = |name: String, run: Box<dyn FnOnce(usize) -> Outcome + Send>| {
        if only.as_ref().is_none_or(|o| name.contains(o.as_str())) {
            jobs.push(pool::Job {
                weight: weight(&name),
                run,
            });
        }
    };
    for cfg in configs {
        add(
            cfg.name.to_string(),
            Box::new(move |t| check(&cfg, max_states, t)),
        );
    }
    for cfg in dynres_verification::fair::fair_configs() {
        add(
            dynres_verification::fair::fair_name(&cfg),
            Box::new(move |t| check_fair(&cfg, max_states, t)),
        );
    }
    for cfg in pset_model::pr_configs() {
        add(
            cfg.name.to_string(),
            Box::new(move |t| pset_model::check(&cfg, max_states, t)),
        );
    }
    for cfg in spawn_configs::pr_configs() {
        add(
            cfg.name.to_string(),
            Box::new(move |t| check_spawn(&cfg, max_states, t)),
        );
    }
    for cfg in ends_model::pr_configs() {
        add(
            cfg.name.to_string(),
            Box::new(move |t| ends_model::check(&cfg, max_states, t)),
        );
    }
    for cfg in liveness_model::pr_configs() {
        add(
            cfg.name.to_string(),
            Box::new(move |t| liveness_model::check(&cfg, max_states, t)),
        );
    }
    for cfg in giveback_model::pr_configs() {
        add(
            cfg.name.to_string(),
            Box::new(move |t| giveback_model::check(&cfg, max_states, t)),
        );
    }
    for cfg in names_model::pr_configs() {
        add(
            cfg.name.to_string(),
            Box::new(move |t| names_model::check(&cfg, max_states, t)),
        );
    }
    for cfg in spawn_mpi_model::pr_configs() {
        add(
            cfg.name.to_string(),
            Box::new(move |t| spawn_mpi_model::check(&cfg, max_states, t)),
        );
    }
    let started = Instant::now();
    let plan = pool::plan(jobs.len(), threads);
    let outcomes: Vec<Outcome> = pool::run(jobs, threads, |_, o| print_row(o));
    let wall = started.elapsed().as_secs_f64();
    let states: usize = outcomes.iter().map(|o| o.states).sum();
    println!(
        "explored {states} unique states in {wall:.1} s on {} thread(s): {:.0} states/s \
         ({} configuration(s) at once, {} checker thread(s) each)",
        threads.max(1),
        states as f64 / wall.max(1e-9),
        plan.workers,
        plan.threads_per_job,
    );
    // Golden counts pin the PR tier; nightly-only configurations are reported, not pinned.
    let nightly_only: Vec<&str> = nightly_configs().iter().map(|c| c.name).collect();
    let pinned: Vec<Outcome> = outcomes
        .iter()
        .filter(|o| !nightly_only.contains(&o.name.as_str()))
        .cloned()
        .collect();
    let changed = golden::changed(&pinned);
    let (golden_ok, report) = golden::compare(&pinned, bless, only.is_some());
    for line in report {
        println!("{line}");
    }
    if bless && golden_ok {
        // A new count is accepted only knowing what it still guarantees (issue 33).
        let nightly = matches!(tier, Tier::Nightly);
        for line in dynres_verification::coverage::bless_report(&changed, nightly) {
            println!("{line}");
        }
    }
    println!();
    println!(
        "{:<28} {:<64} {:>10} {:>8}  result",
        "planted bug", "must fail", "states", "seconds"
    );
    let planted: Vec<_> = corpus()
        .into_iter()
        .filter(|p| only.as_ref().is_none_or(|o| p.config.contains(o.as_str())))
        .collect();
    let hunt_jobs: Vec<pool::Job<'_, Hunt>> = planted
        .iter()
        .map(|p| pool::Job::new(weight(p.config), move |t| hunt(p, t)))
        .collect();
    let hunts = pool::run(hunt_jobs, threads, |_, h| {
        let result = if h.caught { "caught" } else { "MISSED" };
        println!(
            "{:<28} {:<64} {:>10} {:>8.2}  {result}",
            format!("{:?}", h.planted.bug),
            h.planted.property,
            h.states,
            h.seconds
        );
        if verbose && h.caught {
            println!("{}", h.trace);
        }
    });
    let caught = hunts.iter().filter(|h| h.caught).count();
    println!("planted bugs caught: {caught}/{}", hunts.len());
    // Every always-property must have been seen to fail (spec/verification.md §5).
    let unplanted = if only.is_none() {
        unplanted()
    } else {
        Vec::new()
    };
    if unplanted.is_empty() {
        if only.is_none() {
            println!("every always-property is broken by some planted bug");
        }
    } else {
        println!(
            "always-properties no planted bug breaks ({}):",
            unplanted.len()
        );
        for name in &unplanted {
            println!("  {name}");
        }
    }
    if let Some(path) = json {
        let rows: Vec<String> = outcomes
            .iter()
            .map(|o| {
                format!(
                    "  {{\"config\": \"{}\", \"states\": {}, \"depth\": {}, \"seconds\": {:.3}, \"passed\": {}}}",
                    o.name, o.states, o.depth, o.seconds, o.passed()
                )
            })
            .collect();
        if let Err(e) = std::fs::write(&path, format!("[\n{}\n]\n", rows.join(",\n"))) {
            eprintln!("dynres-verification: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if golden_ok && outcomes.iter().all(Outcome::passed) && hunts.iter().all(|h| h.caught) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One table row, then the readable trace of every failed property.
fn print_row(o: &Outcome) {
    let result = if o.truncated {
        "BOUND HIT (state budget)".to_string()
    } else if o.timed_out {
        "BOUND HIT (time: not explored to its end)".to_string()
    } else if o.passed() {
        "ok".to_string()
    } else {
        format!("FAIL ({})", o.failures.len())
    };
    println!(
        "{:<28} {:>12} {:>6} {:>9.2}  {result}",
        o.name, o.states, o.depth, o.seconds
    );
    for note in &o.notes {
        println!("  {note}");
    }
    for (prop, trace) in &o.failures {
        println!("  property {prop:?} violated:\n{trace}");
    }
}

/// Serves stateright's Explorer for one configuration (never returns on success).
fn explore(config: &str) -> ExitCode {
    use stateright::Model;
    if let Some(cfg) = pr_configs()
        .into_iter()
        .chain(nightly_configs())
        .find(|c| c.name == config)
    {
        eprintln!("serving the Explorer for {config} on http://127.0.0.1:3000");
        let _checker = cfg.model().checker().serve("127.0.0.1:3000");
    } else if let Some(cfg) = spawn_configs::pr_configs()
        .into_iter()
        .find(|c| c.name == config)
    {
        eprintln!("serving the Explorer for {config} on http://127.0.0.1:3000");
        let _checker = cfg.model().checker().serve("127.0.0.1:3000");
    } else {
        eprintln!("dynres-verification: no configuration named {config:?}");
        return ExitCode::from(2);
    }
    loop {
        std::thread::park();
    }
}
