//! Example applications, built into the `dynres` binary (`dynres run --example NAME`)
//! so that one `cargo run` builds everything a first job needs.

pub mod check;
pub mod plan;
pub mod synthetic;
pub mod work;

use std::process::ExitCode;

/// The built-in examples.
pub const EXAMPLES: &[&str] = &["synthetic", "check"];

/// Runs example `name` with `args` (as if they were its command line).
pub fn run_example(name: &str, args: &[String]) -> ExitCode {
    match name {
        "synthetic" => synthetic::main(args),
        "check" => check::main(args),
        _ => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("dynres: no example {name:?}\n").as_bytes(),
            );
            ExitCode::from(2)
        }
    }
}
