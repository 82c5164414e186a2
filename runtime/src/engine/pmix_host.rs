//! The engine's answers to the job's PMIx server (`runtime/src/pmix.rs`): libpmix's
//! upcalls, as [`Request`]s, every one answered (PMIS-11). Names go to the master's data server as the calling
//! process' own requests (PMIS-8), `MPI_Abort` ends the job (PMIS-7); the rest a
//! one-host job never needs is refused at once, so no client waits on it.

use dynres_core::Duration;
use dynres_core::rc::SpawnCommand;
use dynres_core::rc::{ClientReply, ClientRequest, DaemonInput, ReqId};
use dynres_pmix::{LookupDone, OpDone, Request, SpawnDone, Status, Value};

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
    /// A spawn, answered with its children's namespace.
    Spawn(SpawnDone),
}

impl Engine {
    /// Answers one upcall, or hands it to the daemon machine.
    pub(super) fn on_pmix(&mut self, request: Request) {
        tracing::trace!(?request, "PMIx upcall");
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
                if let Some(rank) = self.pmix_rank(&from) {
                    self.pmi_abort(rank, status, &message);
                }
            }
            Request::Publish {
                from,
                mut entries,
                done,
            } => match (entries.pop(), entries.is_empty()) {
                (Some((key, value)), true) => {
                    let value = encode_value(&value);
                    let request = ClientRequest::Publish { key, value };
                    self.pmix_ask(&from, request, Pending::Op(done));
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
                    self.pmix_ask(&from, request, Pending::Lookup(key, done));
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
                    self.pmix_ask(&from, ClientRequest::Unpublish { key }, Pending::Op(done));
                }
                _ => done.complete(Err(Status::NotSupported)),
            },
            // The kernel's spawn (all children get slots or none start); the children
            // learn their parent from the environment it carries (PARENT_ENV).
            Request::Spawn { from, apps, done } => {
                let commands = apps
                    .iter()
                    .map(|a| SpawnCommand {
                        program: a.cmd.clone(),
                        args: a.argv.iter().skip(1).cloned().collect(),
                        count: a.maxprocs,
                    })
                    .collect();
                let mut env: Vec<(String, String)> =
                    apps.into_iter().next().map(|a| a.env).unwrap_or_default();
                env.push((
                    crate::pmix::PARENT_ENV.into(),
                    format!("{}@{}", from.1, from.0),
                ));
                let request = ClientRequest::Spawn { commands, env };
                self.pmix_ask(&from, request, Pending::Spawn(done));
            }
            // A one-host job (PMIx is served on one host only): libpmix calls up once
            // every participant, all of them local, is in (a spawn's connect spans the
            // parents' and the children's namespaces), so nobody else is to wait for.
            Request::Connect { done, .. } | Request::Disconnect { done, .. } => {
                done.complete(Ok(()));
            }
            // libpmix completes a fence of local processes itself: one reaching the host
            // spans nodes, which a one-host job has not.
            Request::Fence { done, .. } => done.complete(Err(Status::NotSupported)),
            Request::DirectModex { done, .. } => done.complete(Err(Status::NotFound)),
        }
    }

    /// The job's rank of a PMIx process (a spawn's children have ranks of their own).
    fn pmix_rank(&self, from: &dynres_pmix::Proc) -> Option<u32> {
        self.pmix.as_ref().and_then(|h| h.job_rank(from))
    }

    /// Sends `request` to the daemon machine as `from`'s, its answer to `pending`; a
    /// process this runtime does not know is answered with an error at once.
    fn pmix_ask(&mut self, from: &dynres_pmix::Proc, request: ClientRequest, pending: Pending) {
        let Some(rank) = self.pmix_rank(from) else {
            tracing::warn!(?from, "a PMIx request from an unknown process: refused");
            return;
        };
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
            (Pending::Spawn(done), ClientReply::Spawned(r)) => match (r, &self.pmix) {
                (Ok(s), Some(host)) => done.complete(Ok(host.spawn_namespace(&s.app))),
                (r, _) => {
                    tracing::warn!(error = ?r.err(), "a PMIx spawn failed");
                    done.complete(Err(Status::Error));
                }
            },
            (Pending::Lookup(key, done), ClientReply::Lookup(r)) => {
                done.complete(
                    r.map(|v| vec![(key, decode_value(&v))])
                        .map_err(|_| Status::NotFound),
                );
            }
            // Dropped: libpmix is answered with an error.
            (_, other) => tracing::warn!(?other, "unexpected reply to a PMIx upcall"),
        }
        None
    }
}

/// Marks a published value as a PMIx one of a type other than a string.
const TYPED: &str = "\u{1}pmix:";

/// A PMIx value as the data server's string (PMIS-11): strings as they are, so that
/// other clients (PMI-1, dynres') read them; other types tagged (`\x01pmix:b:` and
/// hex bytes, `i:`, `u:`, `t`/`f`). Open MPI publishes byte objects (its context ids).
fn encode_value(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Bytes(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("{TYPED}b:{hex}")
        }
        Value::Int(i) => format!("{TYPED}i:{i}"),
        Value::UInt(u) => format!("{TYPED}u:{u}"),
        Value::Bool(t) => format!("{TYPED}{}", if *t { "t" } else { "f" }),
    }
}

/// The PMIx value of a data-server string ([`encode_value`]'s inverse; an untagged or
/// malformed one is a string).
fn decode_value(s: &str) -> Value {
    let Some(rest) = s.strip_prefix(TYPED) else {
        return Value::Str(s.into());
    };
    let typed = match rest.split_at_checked(2) {
        Some(("b:", hex)) if hex.len() % 2 == 0 => (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()
            .map(Value::Bytes),
        Some(("i:", n)) => n.parse().ok().map(Value::Int),
        Some(("u:", n)) => n.parse().ok().map(Value::UInt),
        _ => match rest {
            "t" => Some(Value::Bool(true)),
            "f" => Some(Value::Bool(false)),
            _ => None,
        },
    };
    typed.unwrap_or_else(|| Value::Str(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_survive_the_data_server() {
        for v in [
            Value::Str("job-1.*:2".into()),
            Value::Str(String::new()),
            Value::Bytes(vec![2, 8, 255, 0]),
            Value::Bytes(Vec::new()),
            Value::Int(-7),
            Value::UInt(u64::MAX),
            Value::Bool(true),
            Value::Bool(false),
        ] {
            assert_eq!(decode_value(&encode_value(&v)), v);
        }
        // Strings stay readable by PMI-1 and dynres clients; odd tags are strings.
        assert_eq!(encode_value(&Value::Str("port".into())), "port");
        let odd = format!("{TYPED}b:zz");
        assert_eq!(decode_value(&odd), Value::Str(odd.clone()));
    }
}
