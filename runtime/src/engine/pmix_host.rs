//! The engine's answers to its node's PMIx server (`runtime/src/pmix.rs`): libpmix's
//! upcalls, as [`Request`]s, every one answered (PMIS-11). A fence across nodes is the
//! kernel's modex over the namespace's world, the node's blob carried by its local
//! participants (PMIS-14, `dynres_core::pmi::fence`); names go to the master's data
//! server as the calling process' own requests (PMIS-8); `MPI_Abort` ends the job
//! (PMIS-7); the rest is refused at once, so no client waits on it.

use dynres_core::Duration;
use dynres_core::pmi::fence;
use dynres_core::pset::PsetName;
use dynres_core::rc::wire::MAX_VALUE_LEN;
use dynres_core::rc::{ClientReply, ClientRequest, DaemonInput, ModexData, RcError, ReqId};
use dynres_core::rc::{SpawnCommand, SpawnWatch};
use dynres_core::trace::hex;
use dynres_pmix::{
    FenceDone, LookupDone, ModexDone, OpDone, QUERY_NUM_PSETS, QUERY_PSET_MEMBERSHIP,
    QUERY_PSET_NAMES, Query, QueryValue, RANK_WILDCARD, Request, SpawnDone, Status, Value,
};

use super::Engine;

/// The first request id of PMIx upcalls: apart from a process' own ids (from 0) and
/// its PMI session's (`dynres_core::pmi::FIRST_REQUEST`).
const FIRST: ReqId = 1 << 61;

/// How long a waiting lookup (`PMIX_WAIT`, spawn's connect/accept) may wait.
const LOOKUP_WAIT: Duration = Duration::from_secs(60);

/// How long a fence may wait for the other nodes: Open MPI fences in `MPI_Init` and
/// `MPI_Finalize`, which slow starts may spread over minutes; a process that dies
/// instead ends the job (or leaves it, `--on-loss`) long before this.
pub(super) const FENCE_WAIT: Duration = Duration::from_secs(3600);

/// An upcall answered once all of its `left` requests are: a fence whose local
/// participants' modex requests are out, or a connect whose participants' data is being
/// published.
pub(super) struct Gather<D> {
    /// Requests not answered yet.
    left: usize,
    /// The answer, until given.
    done: Option<D>,
}

/// A fence across nodes (PMIS-14).
pub(super) type Fence = Gather<FenceDone>;

/// A connect across nodes (PMIS-16).
pub(super) type Connect = Gather<OpDone>;

/// An upcall waiting for the daemon's reply.
pub(super) enum Pending {
    /// One local participant's part of fence `id`.
    Fence(u64),
    /// One local participant's data, published for connect `id` (PMIS-16).
    Connect(u64),
    /// A connect's lookup of another job's namespace size (PMIS-20).
    ConnectNamespace(u64, String),
    /// A fence across jobs (PMIS-21): a local part published (`None`), or another
    /// participant's part looked up.
    CrossFence(u64, Option<dynres_core::ProcessId>),
    /// A direct modex: the looked-up data of a process on another node.
    DirectModex(ModexDone),
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
            Request::ClientConnected { proc_, done } => {
                done.complete(Ok(()));
                // SPAWN-25: the process reached its MPI library.
                if let Some(rank) = self.pmix_rank(&proc_) {
                    let pid = self.pid(rank);
                    self.daemon_input(DaemonInput::Started { pid });
                }
            }
            Request::ClientFinalized { done, .. } => done.complete(Ok(())),
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
                // Open MPI connects to its children itself (SPAWN-24).
                let watch = SpawnWatch::Job;
                let request = ClientRequest::Spawn {
                    commands,
                    env,
                    watch,
                };
                self.pmix_ask(&from, request, Pending::Spawn(done));
            }
            // libpmix calls up once this node's participants are in (a spawn's connect
            // spans the parents' and the children's namespaces). On one host every
            // participant is local: nobody else is to wait for. Across hosts each node
            // first publishes its participants' data for the others' direct modex.
            Request::Connect { procs, done } => self.pmix_connect(&procs, done),
            Request::Disconnect { done, .. } => done.complete(Ok(())),
            // libpmix completes a fence of local processes itself: one reaching the host
            // spans nodes.
            Request::Fence {
                procs, data, done, ..
            } => self.pmix_fence(&procs, &data, done),
            Request::DirectModex { proc_, done } => self.pmix_direct_modex(proc_, done),
            Request::Query { queries, done, .. } => {
                let answers = self.pmix_query(&queries);
                done.complete(Ok(answers));
            }
        }
    }

    /// PMIS-15: the pset queries, answered from this node's replica (the psets the
    /// kernel defined, by name, and their members as PMIx processes); other keys, and
    /// psets the replica does not hold, are left out (none known: `NOT_FOUND`).
    fn pmix_query(&self, queries: &[Query]) -> Vec<(String, QueryValue)> {
        let psets: Vec<(&PsetName, &dynres_core::ProcRuns)> =
            self.daemon.psets().map(|(n, (m, _))| (n, m)).collect();
        let mut out = Vec::new();
        for q in queries {
            for key in &q.keys {
                let value = match key.as_str() {
                    QUERY_NUM_PSETS => Some(QueryValue::Size(psets.len())),
                    QUERY_PSET_NAMES => Some(QueryValue::Str(
                        psets
                            .iter()
                            .map(|(n, _)| n.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                    )),
                    QUERY_PSET_MEMBERSHIP => q
                        .pset
                        .as_deref()
                        .and_then(|want| psets.iter().find(|(n, _)| n.to_string() == want))
                        .zip(self.pmix.as_ref())
                        .map(|((_, members), host)| {
                            QueryValue::Procs(
                                members
                                    .iter()
                                    .filter_map(|p| host.pmix_proc(p.rank))
                                    .collect(),
                            )
                        }),
                    _ => None,
                };
                out.extend(value.map(|v| (key.clone(), v)));
            }
        }
        out
    }

    /// PMIS-14: a fence of a whole namespace across nodes is one modex over its pset
    /// (the job's world, or a spawn's application), each local process of it carrying
    /// its part of this node's blob. A fence of a subset of ranks is refused at once.
    fn pmix_fence(&mut self, procs: &[dynres_pmix::Proc], data: &[u8], done: FenceDone) {
        let Some(host) = self.pmix.clone() else {
            done.complete(Err(Status::Error));
            return;
        };
        // The whole of one namespace: the job's (its world) or a spawn's (its
        // application's pset, as the children's PMI barrier is, PMIS-10).
        let pset = match procs {
            [(ns, RANK_WILDCARD)] if *ns == host.namespace => Some(PsetName::world()),
            [(ns, RANK_WILDCARD)] => host
                .spawn_app(ns)
                .and_then(|app| PsetName::app_root(app).ok()),
            _ => None,
        };
        let done = match pset {
            Some(_) => done,
            None => match self.pmix_cross_fence(&host, procs, data, done) {
                Ok(()) => return,
                Err(done) => done,
            },
        };
        let Some(pset) = pset else {
            tracing::warn!(?procs, "a PMIx fence of part of a namespace is not served");
            done.complete(Err(Status::NotSupported));
            return;
        };
        let local = host.local_procs(procs);
        let parts = match fence::split(host.this_node(), data, local.len()) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::error!("PMIx fence: {e}");
                done.complete(Err(Status::Error));
                return;
            }
        };
        // Fences and connects are numbered from the same counter as the requests.
        let id = self.pmix_asked;
        self.pmix_asked += 1;
        self.pmix_fences.insert(
            id,
            Fence {
                left: local.len(),
                done: Some(done),
            },
        );
        for (from, data) in local.into_iter().zip(parts) {
            let request = ClientRequest::Modex {
                pset: pset.clone(),
                data,
                timeout: FENCE_WAIT,
            };
            self.pmix_ask(&from, request, Pending::Fence(id));
        }
    }

    /// One local participant's modex reply to fence `id`: the last one answers it with
    /// every node's blob.
    fn pmix_fence_part(&mut self, id: u64, reply: Result<ModexData, RcError>) {
        let Some(f) = self.pmix_fences.get_mut(&id) else {
            return;
        };
        f.left = f.left.saturating_sub(1);
        let answer = match reply {
            Ok(table) if f.left == 0 => fence::join(&table.entries).map_err(|e| {
                tracing::error!("PMIx fence: {e}");
                Status::Error
            }),
            Ok(_) => return,
            Err(e) => {
                tracing::error!(error = %e, "PMIx fence across nodes failed");
                Err(Status::Error)
            }
        };
        if let Some(done) = f.done.take() {
            done.complete(answer);
        }
        if f.left == 0 {
            self.pmix_fences.remove(&id);
        }
    }

    /// PMIS-16: a connect in a job on several hosts publishes the committed data of
    /// this node's participants in the data server (`pmix-dm:NS:RANK`, hex), where
    /// the other nodes' direct modex finds it, and is answered once all are published.
    fn pmix_connect(&mut self, procs: &[dynres_pmix::Proc], done: OpDone) {
        let Some(host) = self.pmix.clone() else {
            done.complete(Err(Status::Error));
            return;
        };
        let local = host.local_procs(procs);
        // PMIS-20: namespaces of another job (connect/accept between jobs that share a
        // data server, NAMES-1), new to this node.
        let mut foreign: Vec<&str> = procs
            .iter()
            .map(|(ns, _)| ns.as_str())
            .filter(|ns| host.spawn_app(ns).is_none() && !host.knows(ns))
            .collect();
        foreign.sort_unstable();
        foreign.dedup();
        if (host.nodes() == 1 && foreign.is_empty()) || local.is_empty() {
            done.complete(Ok(()));
            return;
        }
        // A spawn's namespace whose processes all run elsewhere: libpmix takes their
        // data only for a namespace it knows. Its size is its application's pset.
        for (ns, _) in procs {
            let Some(app) = host.spawn_app(ns) else {
                continue;
            };
            let size = PsetName::app_root(app)
                .ok()
                .and_then(|root| self.daemon.pset(&root).map(|(m, _)| m.len()));
            let registered = match size.map(u32::try_from) {
                Some(Ok(size)) => host.know_remote_namespace(ns, size),
                _ => Err(format!("no pset of the spawn {app} on this node")),
            };
            if let Err(why) = registered {
                tracing::error!("PMIx connect: {why}");
                done.complete(Err(Status::Error));
                return;
            }
        }
        // PMIS-20: with another job, each side publishes the size of its own
        // namespaces and registers the other's once it is there.
        let ours: Vec<(String, u32)> = if foreign.is_empty() {
            Vec::new()
        } else {
            let mut ours: Vec<(String, u32)> = procs
                .iter()
                .filter(|(ns, _)| *ns == host.namespace || host.spawn_app(ns).is_some())
                .filter_map(|(ns, _)| Some((ns.clone(), self.pmix_ns_size(&host, ns)?)))
                .collect();
            ours.sort_unstable();
            ours.dedup();
            ours
        };
        let id = self.pmix_asked;
        self.pmix_asked += 1;
        self.pmix_connects.insert(
            id,
            Connect {
                left: local.len() + ours.len() + foreign.len(),
                done: Some(done),
            },
        );
        let me = local[0].clone();
        for (ns, size) in ours {
            let request = ClientRequest::Publish {
                key: namespace_key(&ns),
                value: size.to_string(),
            };
            self.pmix_ask(&me, request, Pending::Connect(id));
        }
        for ns in foreign {
            let request = ClientRequest::Lookup {
                key: namespace_key(ns),
                wait: Some(LOOKUP_WAIT),
            };
            self.pmix_ask(&me, request, Pending::ConnectNamespace(id, ns.to_string()));
        }
        for p in local {
            if let Err(why) = host.request_blob(id, p) {
                tracing::error!("{why}");
                self.pmix_connect_part(id, Err(Status::Error));
            }
        }
    }

    /// The size of one of this job's PMIx namespaces: the job's own, or a spawn's (its
    /// application's pset in this node's replica).
    pub(super) fn pmix_ns_size(&self, host: &crate::pmix::PmixHost, ns: &str) -> Option<u32> {
        match host.spawn_app(ns) {
            None => Some(host.job_size()),
            Some(app) => {
                let root = PsetName::app_root(app).ok()?;
                u32::try_from(self.daemon.pset(&root)?.0.len()).ok()
            }
        }
    }

    /// libpmix answered a `dmodex_request` made for connect `connect`: the data goes to
    /// the data server as the process' own publication.
    pub(super) fn on_pmix_blob(
        &mut self,
        connect: u64,
        proc_: dynres_pmix::Proc,
        blob: Result<Vec<u8>, Status>,
    ) {
        tracing::debug!(
            connect,
            ?proc_,
            ok = blob.is_ok(),
            "PMIx data for a connect"
        );
        let value = match blob {
            Ok(b) if 2 * b.len() <= MAX_VALUE_LEN => hex(&b),
            Ok(b) => {
                tracing::error!(
                    bytes = b.len(),
                    "PMIx data of {} rank {} exceeds a published value",
                    proc_.0,
                    proc_.1
                );
                self.pmix_connect_part(connect, Err(Status::Error));
                return;
            }
            Err(status) => {
                tracing::error!(
                    ?status,
                    "libpmix gave no data for {} rank {}",
                    proc_.0,
                    proc_.1
                );
                self.pmix_connect_part(connect, Err(status));
                return;
            }
        };
        let key = dmodex_key(&proc_);
        let request = ClientRequest::Publish { key, value };
        self.pmix_ask(&proc_, request, Pending::Connect(connect));
    }

    /// One participant's data is published (or not) for connect `id`: the last one
    /// answers it; the first failure fails it.
    fn pmix_connect_part(&mut self, id: u64, r: Result<(), Status>) {
        let Some(c) = self.pmix_connects.get_mut(&id) else {
            return;
        };
        c.left = c.left.saturating_sub(1);
        if r.is_err() || c.left == 0 {
            if let Some(done) = c.done.take() {
                done.complete(r);
            }
        }
        if c.left == 0 {
            self.pmix_connects.remove(&id);
        }
    }

    /// PMIS-16: the data of a process on another node is what its node published at
    /// the connect: a waiting lookup, on behalf of any process of this node.
    fn pmix_direct_modex(&mut self, proc_: dynres_pmix::Proc, done: ModexDone) {
        let Some(me) = self.pmix.as_ref().and_then(|h| h.any_local_proc()) else {
            done.complete(Err(Status::NotFound));
            return;
        };
        tracing::debug!(?proc_, ?me, "PMIx direct modex through the data server");
        let request = ClientRequest::Lookup {
            key: dmodex_key(&proc_),
            wait: Some(LOOKUP_WAIT),
        };
        self.pmix_ask(&me, request, Pending::DirectModex(done));
    }

    /// The job's rank of a PMIx process (a spawn's children have ranks of their own).
    fn pmix_rank(&self, from: &dynres_pmix::Proc) -> Option<u32> {
        self.pmix.as_ref().and_then(|h| h.job_rank(from))
    }

    /// Sends `request` to the daemon machine as `from`'s, its answer to `pending`; a
    /// process this runtime does not know is answered with an error at once.
    pub(super) fn pmix_ask(
        &mut self,
        from: &dynres_pmix::Proc,
        request: ClientRequest,
        pending: Pending,
    ) {
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
            (Pending::Fence(id), ClientReply::Modex(r)) => self.pmix_fence_part(id, r),
            // Published once: a later connect of the same process finds its data there.
            (Pending::Connect(id), ClientReply::Published(r)) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "PMIx data published before");
                }
                self.pmix_connect_part(id, Ok(()));
            }
            // PMIS-20: the other job's namespace, registered before the connect is
            // answered.
            (Pending::ConnectNamespace(id, ns), ClientReply::Lookup(r)) => {
                let registered = match (r, &self.pmix) {
                    (Ok(size), Some(host)) => match size.parse::<u32>() {
                        Ok(size) => host.know_remote_namespace(&ns, size),
                        Err(_) => Err(format!("the size of {ns} is not a number: {size:?}")),
                    },
                    (Err(e), _) => Err(format!("the other job's namespace {ns}: {e}")),
                    (Ok(_), None) => Err("no PMIx server".into()),
                };
                let part = registered.map_err(|why| {
                    tracing::error!("PMIx connect: {why}");
                    Status::Error
                });
                self.pmix_connect_part(id, part);
            }
            (Pending::CrossFence(id, from), reply) => self.pmix_cross_part(id, from, reply),
            (Pending::DirectModex(done), ClientReply::Lookup(r)) => {
                tracing::debug!(found = ?r.as_ref().map(String::len), "PMIx direct modex answered");
                done.complete(
                    r.ok()
                        .and_then(|v| dynres_core::trace::unhex(&v))
                        .ok_or(Status::NotFound),
                );
            }
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

/// The data server's key for the size of a PMIx namespace a connect between jobs
/// shares (PMIS-20).
fn namespace_key(ns: &str) -> String {
    format!("pmix-ns:{ns}")
}

/// The data server's key for a PMIx process's committed data (PMIS-16).
fn dmodex_key(proc_: &dynres_pmix::Proc) -> String {
    format!("pmix-dm:{}:{}", proc_.0, proc_.1)
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
