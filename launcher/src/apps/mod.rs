//! Example applications, built into the `dynres` binary (`dynres run --example NAME`)
//! so that one `cargo run` builds everything a first job needs.

pub mod alltoall;
pub mod check;
pub mod hello;
pub mod latency;
pub mod pingpong;
pub mod plan;
pub mod spawn;
pub mod synthetic;
pub mod work;

use std::process::ExitCode;

/// The built-in examples.
pub const EXAMPLES: &[&str] = &[
    "synthetic",
    "check",
    "hello",
    "latency",
    "pingpong",
    "spawn",
];

/// Checks example `name`'s arguments without running it, so that `dynres run
/// --example NAME -- ARGS` refuses bad ones before the job starts instead of in every
/// process. `Err` is one line.
pub fn validate(name: &str, args: &[String]) -> Result<(), String> {
    match name {
        "synthetic" => synthetic::validate(args),
        "check" => check::validate(args),
        "hello" => hello::validate(args),
        "latency" => latency::validate(args),
        "pingpong" => pingpong::validate(args),
        "spawn" => spawn::validate(args),
        _ => Err(format!(
            "no example {name:?} (have: {})",
            EXAMPLES.join(", ")
        )),
    }
}

/// Whether `args` ask example `name` for its help or version (`-h`, `--help`,
/// `--version`): `dynres run --example NAME -- --help` prints it once instead of
/// starting a job whose every rank would print it.
pub fn asks_for_help(name: &str, args: &[String]) -> bool {
    fn asks<A: clap::Parser>(name: &str, args: &[String]) -> bool {
        matches!(parse::<A>(name, args), Err(e) if is_help(&e))
    }
    match name {
        "synthetic" => asks::<synthetic::Args>(name, args),
        "pingpong" => asks::<pingpong::Args>(name, args),
        "latency" => asks::<latency::Args>(name, args),
        "spawn" => asks::<spawn::Args>(name, args),
        _ => false,
    }
}

/// Parses `args` as example `name`'s command line.
fn parse<A: clap::Parser>(name: &str, args: &[String]) -> Result<A, clap::Error> {
    A::try_parse_from(std::iter::once(name.to_string()).chain(args.iter().cloned()))
}

/// Whether a parse "failed" by asking for help or the version.
fn is_help(e: &clap::Error) -> bool {
    matches!(
        e.kind(),
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
    )
}

/// Parses an example's arguments for [`validate`]: `Ok(None)` for `--help` /
/// `--version` (not a mistake: every process prints it and exits), `Err` one line.
fn parse_for_check<A: clap::Parser>(name: &str, args: &[String]) -> Result<Option<A>, String> {
    match parse::<A>(name, args) {
        Ok(a) => Ok(Some(a)),
        Err(e) if is_help(&e) => Ok(None),
        Err(e) => Err(clap_line(&e)),
    }
}

/// Parses example `name`'s `args`; `Err` is the exit status once clap's message is
/// printed: 0 for `--help`/`--version`, 2 for wrong arguments.
fn parse_or_exit<A: clap::Parser>(name: &str, args: &[String]) -> Result<A, ExitCode> {
    parse::<A>(name, args).map_err(|e| {
        let _ = e.print();
        if is_help(&e) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        }
    })
}

/// An example's entry point: parses `args` (exit 2 with clap's message if they are
/// wrong), runs, and prints one `NAME: error` line and exits 1 if that fails.
fn entry<A: clap::Parser, E: std::fmt::Display>(
    name: &str,
    args: &[String],
    run: impl FnOnce(&A) -> Result<(), E>,
) -> ExitCode {
    let a = match parse_or_exit::<A>(name, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("{name}: {e}\n").as_bytes(),
            );
            ExitCode::FAILURE
        }
    }
}

/// The median of `v` (sorted in place); NaN when empty.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The first line of a clap error, without clap's `error: ` prefix.
fn clap_line(e: &clap::Error) -> String {
    let msg = e.to_string();
    let first = msg.lines().next().unwrap_or("bad arguments");
    first.trim_start_matches("error: ").to_string()
}

/// Runs example `name` with `args` (as if they were its command line).
pub fn run_example(name: &str, args: &[String]) -> ExitCode {
    match name {
        "synthetic" => synthetic::main(args),
        "check" => check::main(args),
        "hello" => hello::main(args),
        "latency" => latency::main(args),
        "pingpong" => pingpong::main(args),
        "spawn" => spawn::main(args),
        _ => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("dynres: no example {name:?}\n").as_bytes(),
            );
            ExitCode::from(2)
        }
    }
}
