//! Example applications, built into the `dynres` binary (`dynres run --example NAME`)
//! so that one `cargo run` builds everything a first job needs.

pub mod check;
pub mod pingpong;
pub mod plan;
pub mod spawn;
pub mod synthetic;
pub mod work;

use std::process::ExitCode;

/// The built-in examples.
pub const EXAMPLES: &[&str] = &["synthetic", "check", "pingpong", "spawn"];

/// Checks example `name`'s arguments without running it, so that `dynres run
/// --example NAME -- ARGS` refuses bad ones before the job starts instead of in every
/// process. `Err` is one line.
pub fn validate(name: &str, args: &[String]) -> Result<(), String> {
    match name {
        "synthetic" => synthetic::validate(args),
        "check" => check::validate(args),
        "pingpong" => pingpong::validate(args),
        "spawn" => spawn::validate(args),
        _ => Err(format!(
            "no example {name:?} (have: {})",
            EXAMPLES.join(", ")
        )),
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
