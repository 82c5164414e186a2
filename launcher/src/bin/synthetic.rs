//! The synthetic benchmark as a program of its own (`dynres run -- synthetic …`); the
//! same code runs as `dynres run --example synthetic -- …`.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    dynres_launcher::apps::run_example("synthetic", &args)
}
