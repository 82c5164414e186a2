//! The tools' side of `cli.sock`: `dynres grow/shrink/replace/status JOB`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use crate::auth::{Peer, say_hello};
use crate::env;
use crate::error::LauncherError;

/// Sends one command line to job `job` and returns its answer (without the `ok` line).
pub fn command(job: &str, line: &str) -> Result<String, LauncherError> {
    if job.is_empty() || job.contains('/') || job.starts_with('.') {
        return Err(LauncherError::Usage(format!("bad job id {job:?}")));
    }
    let dir = env::runtime_root().join(job);
    let secret = std::fs::read_to_string(dir.join(env::SECRET_FILE))
        .map_err(|_| LauncherError::NoSuchJob(job.into()))?;
    let mut s = UnixStream::connect(dir.join(env::CLI_SOCK))
        .map_err(|_| LauncherError::NoSuchJob(job.into()))?;
    let ok = say_hello(&mut s, secret.trim(), Peer::Tool)
        .map_err(|e| LauncherError::io("talk to the job", e))?;
    if !ok {
        return Err(LauncherError::Refused(
            "the job refused the connection".into(),
        ));
    }
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| LauncherError::io("talk to the job", e))?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .map_err(|e| LauncherError::io("talk to the job", e))?;
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
