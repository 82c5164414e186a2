//! `hello`: what an MPI hello world does between `MPI_Init` and `MPI_Finalize` — connect
//! to the runtime, open the transport, make the world communicator (one modex over the
//! application's pset), one barrier, finalize — and member 0 prints
//! `hello: N processes`. It measures whole-job start-up (`dynres-bench mpi` runs it next
//! to the MPI libraries' own hello).

use std::io::Write;
use std::process::ExitCode;

use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport};
use dynres_client::error::CommError;

/// `hello` takes no arguments: any is a mistake, not something to ignore.
pub fn validate(args: &[String]) -> Result<(), String> {
    match args.first() {
        None => Ok(()),
        Some(a) => Err(format!("hello takes no arguments, got {a:?}")),
    }
}

/// Entry point.
pub fn main(args: &[String]) -> ExitCode {
    if let Err(e) = validate(args) {
        let _ = writeln!(std::io::stderr(), "hello: {e}");
        return ExitCode::from(2);
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "hello: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `DYNRES_HELLO_TIMES=1`: each process prints when it finished each step (seconds
/// of the wall clock, to line up with the runtime's debug log), to find where start-up
/// waits.
fn mark(on: bool, what: &str) {
    if on {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() % 60.0);
        let _ = writeln!(std::io::stderr(), "hello-time {what} {t:.6}");
    }
}

fn run() -> Result<(), CommError> {
    let times = std::env::var("DYNRES_HELLO_TIMES").is_ok_and(|v| v == "1");
    mark(times, "start");
    // The devices open on a helper thread while this thread connects to the runtime
    // (the order a new process of a resource change uses too).
    let opening = Transport::open_in_background();
    let mut s = Session::init()?;
    mark(times, "session");
    let transport = opening.finish()?;
    mark(times, "transport");
    let world = s.app_pset();
    let comm = Communicator::create(&mut s, &transport, &world)?;
    mark(times, "modex");
    comm.barrier()?;
    mark(times, "barrier");
    if comm.rank() == 0 {
        let _ = writeln!(std::io::stdout(), "hello: {} processes", comm.size());
    }
    transport.finalize()?;
    mark(times, "finalized");
    Ok(())
}
