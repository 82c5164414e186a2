//! The tools' side of `cli.sock`: `dynres grow/shrink/replace/status JOB`.
//!
//! A tool trusts the job's directory only after checking it (and the runtime directory
//! above it) the way the runtime made it: ours, mode 0700, no symlinks, and the
//! `secret` file ours with mode 0600. Otherwise another local user could plant a fake
//! job whose socket answers in the job's name.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::error::LauncherError;
use crate::private;
use dynres_client::auth::{Peer, say_hello};
use dynres_client::env;

/// How long the runtime may take to answer the hello: it answers at once unless it is
/// stuck, and a tool must not hang on a stuck job.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a command may wait for its answer: a little longer than the runtime
/// itself waits for the engine's answer (`server::ANSWER_TIMEOUT`), so that its own
/// "no answer" arrives first.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(11 * 60);
/// Longest answer read (a `status` table of a very large job included).
const MAX_ANSWER: u64 = 64 << 20;

/// Sends one command line to job `job` and returns its answer (without the `ok` line).
pub fn command(job: &str, line: &str) -> Result<String, LauncherError> {
    let (root, origin) = env::runtime_root_and_origin();
    let dir = private::job_path(&root, job)?;
    let no_job = || LauncherError::NoSuchJob {
        job: job.into(),
        root: root.clone(),
        origin,
    };
    let missing = |e: &LauncherError| matches!(e, LauncherError::Io { source, .. } if source.kind() == ErrorKind::NotFound);
    private::check_dir(&root).map_err(|e| if missing(&e) { no_job() } else { e })?;
    private::check_dir(&dir).map_err(|e| if missing(&e) { no_job() } else { e })?;
    let secret = private::read_file(&dir.join(env::SECRET_FILE), 4096)
        .map_err(|e| if missing(&e) { no_job() } else { e })?;
    let mut s = UnixStream::connect(dir.join(env::CLI_SOCK)).map_err(|e| match e.kind() {
        // No socket, or nobody listening on it: the job is over (or never was).
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => no_job(),
        _ => LauncherError::io(format!("connect to job {job}"), e),
    })?;
    let talk = |e| LauncherError::io("talk to the job", e);
    s.set_read_timeout(Some(HELLO_TIMEOUT)).map_err(talk)?;
    s.set_write_timeout(Some(HELLO_TIMEOUT)).map_err(talk)?;
    let ok = say_hello(&mut s, secret.trim(), Peer::Tool).map_err(|e| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => LauncherError::Refused(format!(
            "job {job} did not answer within {} s",
            HELLO_TIMEOUT.as_secs()
        )),
        _ => talk(e),
    })?;
    if !ok {
        return Err(LauncherError::Refused(
            "the job refused the connection".into(),
        ));
    }
    s.write_all(format!("{line}\n").as_bytes()).map_err(talk)?;
    s.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(talk)?;
    let mut answer = String::new();
    s.take(MAX_ANSWER)
        .read_to_string(&mut answer)
        .map_err(|e| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => LauncherError::Refused(format!(
                "job {job} did not answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            )),
            _ => talk(e),
        })?;
    if let Some(rest) = answer.strip_prefix("ok") {
        Ok(rest.trim_start_matches([' ', '\n']).to_string())
    } else if let Some(rest) = answer.strip_prefix("error: ") {
        Err(LauncherError::Refused(rest.trim().to_string()))
    } else {
        Err(LauncherError::Refused(format!(
            "unexpected answer {:?}",
            answer.trim()
        )))
    }
}
