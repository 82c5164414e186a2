//! Growing a job beyond its Slurm allocation (`spec/runtime.md` GROW-1..3, core's
//! `RC-21`): when core asks for slots it lacks (`NeedSlots`), a second allocation is
//! requested with `salloc --no-shell`, its nodes are added to the job (their daemons are
//! job steps of that allocation, `srun --jobid`), and the allocation is cancelled when
//! its nodes are given back or the job ends. Nothing here decides a protocol step: core
//! decides when a request waits, starts or is refused.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::hosts::{Host, expand_nodelist};

/// A second allocation Slurm granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Its Slurm job id.
    pub job: String,
    /// Its nodes and their CPUs (the job's slots there).
    pub hosts: Vec<Host>,
}

/// The `salloc`s still waiting for Slurm, and whether the job is ending (GROW-3).
struct Pending {
    pids: Vec<u32>,
    ending: bool,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    pids: Vec::new(),
    ending: false,
});

fn lock(m: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long the job's end waits for cancelled `salloc`s to withdraw their requests.
const CANCEL_BOUND: Duration = Duration::from_secs(5);

/// GROW-3: the job ends, so no second allocation may be left waiting in Slurm's queue.
/// Every `salloc` still waiting gets SIGTERM (it then withdraws its request, which
/// SIGKILL at the runtime's exit would leave queued), and this waits for them (bounded);
/// one granted meanwhile is released by [`allocate`], and none starts after.
pub fn cancel_pending() {
    let pids = {
        let mut pending = lock(&PENDING);
        pending.ending = true;
        pending.pids.clone()
    };
    for pid in &pids {
        crate::procs::send_signal(*pid, libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + CANCEL_BOUND;
    while !lock(&PENDING).pids.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asks Slurm for `nodes` whole nodes, waiting at most `wait` for them
/// (`salloc --no-shell --immediate`). The error is one line saying what Slurm said.
pub fn allocate(nodes: u32, wait: Duration, name: &str) -> Result<Grant, String> {
    let secs = wait.as_secs().max(1);
    let mut cmd = Command::new("salloc");
    cmd.args(["--no-shell", "--exclusive"])
        .arg(format!("--nodes={nodes}"))
        .arg(format!("--immediate={secs}"))
        .arg(format!("--job-name={name}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // GROW-3: a request still waiting when the job ends is cancelled (`cancel_pending`).
    let child = {
        let mut pending = lock(&PENDING);
        if pending.ending {
            return Err("the job is ending".into());
        }
        let child =
            crate::procs::spawn_locked(&mut cmd).map_err(|e| format!("cannot run salloc: {e}"))?;
        pending.pids.push(child.id());
        child
    };
    let pid = child.id();
    let out = child.wait_with_output();
    let ending = {
        let mut pending = lock(&PENDING);
        pending.pids.retain(|p| *p != pid);
        pending.ending
    };
    let out = out.map_err(|e| format!("cannot run salloc: {e}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let (Some(job), true) = (granted_job(&said), ending) {
        // Granted as the job ended: nobody would use it or give it back.
        release(&job);
        return Err("the job ended while Slurm granted the nodes".into());
    }
    let job = granted_job(&said).ok_or_else(|| {
        let last = said
            .lines()
            .last()
            .unwrap_or("no output")
            .trim()
            .to_string();
        format!("salloc could not allocate {nodes} more node(s) within {secs} s: {last}")
    })?;
    match describe(&job) {
        Ok(hosts) if !hosts.is_empty() => Ok(Grant { job, hosts }),
        Ok(_) => {
            release(&job);
            Err(format!("Slurm job {job} has no nodes"))
        }
        Err(e) => {
            release(&job);
            Err(e)
        }
    }
}

/// The job id in salloc's `Granted job allocation 123`.
fn granted_job(said: &str) -> Option<String> {
    said.lines().find_map(|l| {
        let rest = l.split("Granted job allocation").nth(1)?;
        let id = rest.split_whitespace().next()?;
        id.chars()
            .all(|c| c.is_ascii_digit())
            .then(|| id.to_string())
    })
}

/// The nodes of Slurm job `job` and the CPUs of each (`scontrol show job`).
fn describe(job: &str) -> Result<Vec<Host>, String> {
    let out = crate::procs::output_locked(
        Command::new("scontrol")
            .args(["show", "job", job])
            .stdin(Stdio::null()),
    )
    .map_err(|e| format!("cannot run scontrol: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scontrol show job {job}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    hosts_of_job(&String::from_utf8_lossy(&out.stdout))
}

/// Parses `scontrol show job`: `NodeList=…`, `NumNodes=…`, `NumCPUs=…`. Exclusive
/// allocations of one node type split their CPUs evenly.
fn hosts_of_job(text: &str) -> Result<Vec<Host>, String> {
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(str::to_string)
    };
    let list = field("NodeList=").ok_or("scontrol shows no NodeList")?;
    let names = expand_nodelist(&list).map_err(|e| e.to_string())?;
    let cpus: u32 = field("NumCPUs=")
        .and_then(|c| c.parse().ok())
        .ok_or("scontrol shows no NumCPUs")?;
    let per = (cpus / (names.len().max(1) as u32)).max(1);
    Ok(names
        .into_iter()
        .map(|name| Host { name, slots: per })
        .collect())
}

/// How long refusals that Slurm calls transient ("try again in a bit") are retried, and
/// the pause between tries. A time bound, not a count: slurmctld itself waits up to 5 s
/// before it refuses a job whose accounting record is being set.
const UPDATE_FOR: Duration = Duration::from_secs(20);
const UPDATE_PAUSE: Duration = Duration::from_millis(250);

/// Shrinks Slurm job `job` to the nodes `list` (`scontrol update JobId=… NodeList=…`,
/// RC-20, GROW-2, GROW-4), run in `cwd` (scontrol writes `slurm_job_<id>_resize.*`
/// there). Refusals Slurm calls transient are retried for [`UPDATE_FOR`]; others end
/// the attempt at once. The error says what Slurm said last.
pub fn shrink_to(job: &str, list: &str, cwd: &Path) -> Result<(), String> {
    let deadline = std::time::Instant::now() + UPDATE_FOR;
    loop {
        let out = crate::procs::output_locked(
            Command::new("scontrol")
                .current_dir(cwd)
                .arg("update")
                .arg(format!("JobId={job}"))
                .arg(format!("NodeList={list}"))
                .stdin(Stdio::null()),
        )
        .map_err(|e| format!("cannot run scontrol: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !transient(&said) || std::time::Instant::now() >= deadline {
            return Err(format!("Slurm did not shrink job {job} to {list}: {said}"));
        }
        tracing::debug!(job, "scontrol update refused, trying again: {said}");
        std::thread::sleep(UPDATE_PAUSE);
    }
}

/// Whether Slurm marks a refusal as one to try again. Without an accounting database
/// (`AccountingStorageType=accounting_storage/none`), Slurm 22.05 gives every resize
/// after a job's first this same answer forever, so retrying stays bounded.
fn transient(said: &str) -> bool {
    said.contains("try again")
}

/// Cancels Slurm job `job` (a second allocation whose nodes the job no longer uses).
pub fn release(job: &str) {
    match crate::procs::output_locked(Command::new("scancel").arg(job).stdin(Stdio::null())) {
        Ok(o) if o.status.success() => tracing::info!("Slurm allocation {job} released"),
        Ok(o) => tracing::error!(
            "scancel {job} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => tracing::error!(error = %e, "cannot run scancel"),
    }
}

/// The launch agent for daemons on a second allocation's nodes: job steps of it.
pub fn agent_for(job: &str) -> Vec<String> {
    vec![
        "srun".into(),
        format!("--jobid={job}"),
        "--nodes=1".into(),
        "--ntasks=1".into(),
        "--overlap".into(),
        "--nodelist".into(),
    ]
}

/// Whole nodes to ask for: enough for `slots` at `per_node` slots each.
pub fn nodes_for(slots: u32, per_node: u32) -> u32 {
    slots.div_ceil(per_node.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salloc_output_gives_the_job_id() {
        let said = "salloc: Pending job allocation 42\nsalloc: job 42 queued and waiting for resources\nsalloc: Granted job allocation 42\n";
        assert_eq!(granted_job(said).as_deref(), Some("42"));
        assert_eq!(
            granted_job("salloc: error: Unable to allocate resources: Immediate"),
            None
        );
    }

    #[test]
    fn scontrol_show_job_gives_nodes_and_slots() {
        let text = "JobId=7 JobName=dynres-grow\n   NumNodes=2 NumCPUs=8 NumTasks=2 CPUs/Task=1\n   NodeList=n[2-3]\n   BatchHost=n2\n";
        let hosts = hosts_of_job(text).unwrap();
        assert_eq!(
            hosts,
            vec![
                Host {
                    name: "n2".into(),
                    slots: 4
                },
                Host {
                    name: "n3".into(),
                    slots: 4
                }
            ]
        );
        assert!(hosts_of_job("JobId=7 NumCPUs=2").is_err());
    }

    #[test]
    fn only_refusals_slurm_calls_transient_are_retried() {
        assert!(transient(
            "Job update not available right now, the DB index is being set, try again in a bit for job 1"
        ));
        assert!(!transient("Invalid node name specified for job 1"));
    }

    #[test]
    fn nodes_for_rounds_up() {
        assert_eq!(nodes_for(1, 2), 1);
        assert_eq!(nodes_for(3, 2), 2);
        assert_eq!(nodes_for(4, 2), 2);
        assert_eq!(nodes_for(5, 0), 5);
    }
}
