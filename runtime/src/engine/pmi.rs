//! The engine's PMI servers (`spec/pmi.md`; PMI-1, and PMI-2 where the client asks for
//! it — the session decides the wire): one [`PmiSession`] per local rank of the
//! job's program, on the socket the rank inherited as `PMI_FD`. The sessions are core's
//! machines; this file only carries their bytes and requests: a session's requests go
//! to the daemon machine as its process' own, and the daemon's replies to them come
//! back here by their request id ([`PmiSession::owns`]).

use std::os::unix::net::UnixStream;

use dynres_core::pmi::{PREPUT_ENV, PmiInput, PmiJob, PmiOutput, PmiSession, decode_preput};
use dynres_core::pset::PsetName;
use dynres_core::rc::onloss::{LossAction, on_abort};
use dynres_core::rc::wire::link::{LinkMsg, MAX_ABORT_MESSAGE, encode_link};
use dynres_core::rc::{ClientReply, DaemonInput, ReqId};
use dynres_core::{Duration, Rank};

use super::Engine;
use crate::conns::Conn;

/// How long one PMI barrier may wait for the job's other processes. MPI programs
/// barrier in `MPI_Init`, which slow starts may spread over minutes; a process that
/// dies instead ends the job (or leaves it, `--on-loss`) long before this.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(3600);

impl Engine {
    /// What the PMI session of `job`'s process will serve (PMIS-9, PMIS-10): its
    /// world is the job's `mpi://WORLD`, or for a spawn's child its spawn's
    /// application, with the spawner's pre-put keys. `None`: the launch gets no PMI
    /// socket (no standing in the replica).
    pub(super) fn pmi_job(&self, job: &crate::procs::LaunchJob) -> Option<PmiJob> {
        let st = job.standing?;
        let ns = self.namespace.as_str();
        let (kvsname, group, preput) = match &job.spawn {
            None => (ns.to_string(), PsetName::world(), Vec::new()),
            Some(s) => {
                let preput = s
                    .command
                    .env
                    .iter()
                    .find(|(k, _)| k == PREPUT_ENV)
                    .map(|(_, v)| decode_preput(v))
                    .unwrap_or_default();
                let group = PsetName::app_root(&s.app).ok()?;
                (format!("{ns}-{}", s.app), group, preput)
            }
        };
        // Every process of its world on this node: the mapping is known without
        // asking the others. Not for a spawn's children (PMIS-10: they find their
        // node-mates themselves); the members of one world must all get the mapping or
        // all go without (MPICH then exchanges host names).
        let mapping = (job.spawn.is_none() && st.local_size == st.size)
            .then(|| format!("(vector,(0,1,{}))", st.size));
        // PMI-2 tells a spawn's children they were spawned by their spawner's job id;
        // all of a job's spawns are the job's, so it is the job's namespace.
        let spawner = job.spawn.as_ref().map(|_| ns.to_string());
        Some(PmiJob {
            pid: self.pid(job.rank),
            rank: st.rank,
            size: st.size,
            appnum: 0,
            universe: st.size,
            kvsname,
            mapping,
            group,
            barrier_timeout: BARRIER_TIMEOUT,
            preput,
            spawner,
        })
    }

    /// A rank's PMI socket is up: its session starts with what [`Engine::pmi_job`]
    /// said at its launch.
    pub(super) fn on_pmi_up(&mut self, conn: u64, rank: Rank, stream: UnixStream) {
        let alive = self.launching.contains_key(&rank) || self.children.contains_key(&rank);
        let (Some(job), true) = (self.pmi_pending.remove(&rank), alive) else {
            tracing::debug!(rank, "PMI socket of a process that is gone: closed");
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        };
        self.conns.insert(conn, Conn::new(rank, stream));
        self.pmi.insert(conn, PmiSession::new(job));
        self.pmi_by_rank.insert(rank, conn);
    }

    /// Bytes from a rank's PMI socket.
    pub(super) fn on_pmi_bytes(&mut self, conn: u64, bytes: Vec<u8>) {
        if tracing::enabled!(tracing::Level::TRACE) {
            let rank = self.pmi.get(&conn).map(|s| s.job().rank);
            tracing::trace!(
                ?rank,
                conn,
                "PMI in: {}",
                String::from_utf8_lossy(&bytes).trim_end()
            );
        }
        // SPAWN-25: the first bytes say the process reached its MPI library.
        if let Some(rank) = self.conns.get(&conn).map(|c| c.rank) {
            if self.pmi_heard.insert(rank) {
                let pid = self.pid(rank);
                self.daemon_input(DaemonInput::Started { pid });
            }
        }
        self.pmi_input(conn, PmiInput::Received(bytes));
    }

    /// Routes a daemon reply to `rank`'s PMI session if the request was the session's;
    /// gives it back otherwise.
    pub(super) fn pmi_reply(
        &mut self,
        rank: Rank,
        req: ReqId,
        reply: ClientReply,
    ) -> Option<ClientReply> {
        let conn = self.pmi_by_rank.get(&rank).copied();
        match conn {
            Some(conn) if self.pmi.get(&conn).is_some_and(|s| s.owns(req)) => {
                self.pmi_input(conn, PmiInput::Reply { req, reply });
                None
            }
            _ => Some(reply),
        }
    }

    /// Forgets a PMI session whose connection is gone.
    pub(super) fn pmi_gone(&mut self, conn: u64) {
        if let Some(s) = self.pmi.remove(&conn) {
            let rank = s.job().rank;
            if self.pmi_by_rank.get(&rank) == Some(&conn) {
                self.pmi_by_rank.remove(&rank);
            }
        }
    }

    fn pmi_input(&mut self, conn: u64, input: PmiInput) {
        let now = self.now();
        let Some(s) = self.pmi.get_mut(&conn) else {
            return;
        };
        s.handle(now, input);
        let (rank, pid) = (s.job().rank, s.job().pid.clone());
        let mut outputs = Vec::new();
        while let Some(o) = s.poll_output() {
            outputs.push(o);
        }
        for o in outputs {
            match o {
                PmiOutput::Send(bytes) => {
                    tracing::trace!(
                        rank,
                        conn,
                        "PMI out: {}",
                        String::from_utf8_lossy(&bytes).trim_end()
                    );
                    let failed = self.conns.get_mut(&conn).and_then(|c| c.send(&bytes).err());
                    if let Some(e) = failed {
                        tracing::warn!(rank, error = %e, "PMI reply not delivered; closing");
                        self.drop_conn(conn);
                        return;
                    }
                }
                PmiOutput::Request { req, request } => {
                    self.daemon_input(DaemonInput::FromClient {
                        from: pid.clone(),
                        req,
                        request,
                    });
                }
                PmiOutput::Aborted { code, message } => self.pmi_abort(rank, code, &message),
                PmiOutput::Close(why) => {
                    tracing::warn!(rank, error = %why, "PMI input refused; closing its socket");
                    self.drop_conn(conn);
                    return;
                }
            }
        }
    }

    /// PMIS-7: `MPI_Abort` ends the whole job, whatever `--on-loss` says (MPI aborts
    /// every process of the communicator, and MPICH waits for its launcher to do it).
    /// The job's exit status is the code asked for: a node daemon tells the master
    /// (`Aborted`, link type 0x0507), which ends the job as if the call were its own.
    pub(super) fn pmi_abort(&mut self, rank: Rank, code: i32, message: &str) {
        let why = format!("rank {rank} called MPI_Abort (code {code}): {message}");
        if self.master.is_some() {
            // PMIS-7 is core's decision; the low 8 bits reach the caller, as from an
            // exit (a code that reads 0 still fails the job: `Outcome::exit_status`).
            let action = on_abort(self.on_loss, self.ending.is_some());
            if action.counts() {
                self.record_failure(rank, Some(code as u32 & 0xff));
            }
            if action == LossAction::EndJob {
                tracing::error!(rank, code, "{why}; ending the job");
                self.ending = Some(why);
                self.kill_all(dynres_core::rc::ends::KillCause::JobEnding);
            } else {
                tracing::error!(rank, code, "{why}");
            }
        } else {
            tracing::error!(rank, code, "{why}; telling the master");
            // The master decides (LINK 0x0507); its Shutdown ends this node's share.
            let message: String = message
                .chars()
                .scan(0, |len, c| {
                    *len += c.len_utf8();
                    (*len <= MAX_ABORT_MESSAGE).then_some(c)
                })
                .collect();
            self.upstream_send(&encode_link(&LinkMsg::Aborted {
                rank,
                code,
                message,
            }));
        }
    }
}
