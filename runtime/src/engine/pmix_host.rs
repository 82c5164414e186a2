//! The engine's answers to the job's PMIx server (`runtime/src/pmix.rs`): libpmix's
//! upcalls, as [`Request`]s, every one answered (PMIS-11). Names go to the master's data server as the calling
//! process' own requests (PMIS-8), `MPI_Abort` ends the job (PMIS-7); the rest a
//! one-host job never needs is refused at once, so no client waits on it.

use dynres_core::Duration;
use dynres_core::rc::{ClientReply, ClientRequest, DaemonInput, ReqId};
use dynres_pmix::{LookupDone, OpDone, Request, Status, Value};

use super::Engine;

/// The first request id of PMIx upcalls: apart from a process' own ids (from 0) and
/// its PMI session's (`dynres_core::pmi::FIRST_REQUEST`).
const FIRST: ReqId = 1 << 61;

/// How long a waiting lookup (`PMIX_WAIT`, spawn's connect/accept) may wait.
const LOOKUP_WAIT: Duration = Duration::from_secs(60);

/// An upcall waiting for the daemon's reply.
pub(super) enum Pending {
    /// Publish or unpublish.
    Op(OpDone),
    /// A lookup of this key.
    Lookup(String, LookupDone),
}

impl Engine {
    /// Answers one upcall, or hands it to the daemon machine.
    pub(super) fn on_pmix(&mut self, request: Request) {
        match request {
            Request::ClientConnected { done, .. } | Request::ClientFinalized { done, .. } => {
                done.complete(Ok(()));
            }
            Request::Abort {
                from,
                status,
                message,
                done,
            } => {
                done.complete(Ok(()));
                self.pmi_abort(from.1, status, &message);
            }
            Request::Publish {
                from,
                mut entries,
                done,
            } => match (entries.pop(), entries.is_empty()) {
                (Some((key, Value::Str(value))), true) => {
                    let request = ClientRequest::Publish { key, value };
                    self.pmix_ask(from.1, request, Pending::Op(done));
                }
                _ => done.complete(Err(Status::NotSupported)),
            },
            Request::Lookup {
                from,
                mut keys,
                wait,
                done,
            } => match (keys.pop(), keys.is_empty()) {
                (Some(key), true) => {
                    let wait = wait.then_some(LOOKUP_WAIT);
                    let request = ClientRequest::Lookup {
                        key: key.clone(),
                        wait,
                    };
                    self.pmix_ask(from.1, request, Pending::Lookup(key, done));
                }
                _ => done.complete(Err(Status::NotSupported)),
            },
            Request::Unpublish {
                from,
                mut keys,
                done,
            } => match (keys.pop(), keys.is_empty()) {
                (None, _) => done.complete(Ok(())),
                (Some(key), true) => {
                    self.pmix_ask(from.1, ClientRequest::Unpublish { key }, Pending::Op(done));
                }
                _ => done.complete(Err(Status::NotSupported)),
            },
            Request::Spawn { from, done, .. } => {
                tracing::warn!(
                    rank = from.1,
                    "MPI_Comm_spawn of an Open MPI program is not served yet: refused"
                );
                done.complete(Err(Status::NotSupported));
            }
            // A one-host job: libpmix completes its fences and connects itself.
            Request::Fence { done, .. } => done.complete(Err(Status::NotSupported)),
            Request::Connect { done, .. } | Request::Disconnect { done, .. } => {
                done.complete(Err(Status::NotSupported));
            }
            Request::DirectModex { done, .. } => done.complete(Err(Status::NotFound)),
        }
    }

    /// Sends `request` to the daemon machine as rank `rank`'s, its answer to `pending`.
    fn pmix_ask(&mut self, rank: u32, request: ClientRequest, pending: Pending) {
        let req = FIRST + self.pmix_asked;
        self.pmix_asked += 1;
        self.pmix_pending.insert(req, pending);
        let from = self.pid(rank);
        self.daemon_input(DaemonInput::FromClient { from, req, request });
    }

    /// Completes the upcall `req` was asked for, if it was one; gives the reply back
    /// otherwise.
    pub(super) fn pmix_reply(&mut self, req: ReqId, reply: ClientReply) -> Option<ClientReply> {
        if req < FIRST {
            return Some(reply);
        }
        let Some(pending) = self.pmix_pending.remove(&req) else {
            return Some(reply);
        };
        match (pending, reply) {
            (Pending::Op(done), ClientReply::Published(r) | ClientReply::Unpublished(r)) => {
                done.complete(r.map_err(|e| {
                    tracing::debug!(error = %e, "PMIx publish/unpublish refused");
                    Status::Error
                }));
            }
            (Pending::Lookup(key, done), ClientReply::Lookup(r)) => {
                done.complete(
                    r.map(|v| vec![(key, Value::Str(v))])
                        .map_err(|_| Status::NotFound),
                );
            }
            // Dropped: libpmix is answered with an error.
            (_, other) => tracing::warn!(?other, "unexpected reply to a PMIx upcall"),
        }
        None
    }
}
