//! One data server for two jobs (`spec/runtime.md` NAMES-1..3), checked with two
//! shipped masters: the guest job's, set up with another job's data server
//! (`DataServer::Forwarded`), and the serving job's, which takes the guest's requests
//! as `MasterInput::Guest`. Between them, what the runtimes carry: each forwarded
//! request in flight to the serving master, each answer in flight back — and what can
//! go wrong on the way: a request or an answer is lost (the driver then reports no
//! answer, `Forwarded { reply: None }`), or the other job answers with a reply of
//! another kind (a peer is not trusted).
//!
//! The clients, each a script of requests sent one after the other:
//! - guest `g0`: publishes `k`, then tries the reserved key `mpi://app/g:accept`, then
//!   unpublishes `k`;
//! - guest `g1`: looks `k` up, waiting;
//! - serving `s0`: looks `k` up, waiting.
//!
//! Properties:
//! - NAMES-1: no request with a reserved key leaves the guest job;
//! - NAMES-3: every request is answered at most once, and with a reply of its kind;
//! - NAMES-3: once nothing is in flight, every publish and unpublish of the guest is
//!   answered (a lookup may wait in the serving master for a key that never comes:
//!   its deadline, not modelled here, bounds it);
//! - NAMES-1 (sometimes): a lookup in the serving job finds the guest's key, and the
//!   guest's own lookup finds it through the serving job.

use std::collections::BTreeMap;

use dynres_core::bugs::Bugs;
use dynres_core::rc::{
    ClientReply, ClientRequest, DataServer, Master, MasterConfig, MasterInput, MasterOutput,
    ToDaemon, ToMaster,
};
use dynres_core::slots::NodeSpec;
use dynres_core::time::{Duration, Instant};
use dynres_core::{Namespace, ProcessId};
use stateright::{Model, Property};

use crate::run::Outcome;

/// The two jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Job {
    /// The job that uses the other's data server.
    Guest,
    /// The job whose data server it is.
    Serving,
}

/// The clients: (job, rank).
const CLIENTS: [(Job, u32); 3] = [(Job::Guest, 0), (Job::Guest, 1), (Job::Serving, 0)];

/// Client `c`'s requests, in order.
fn script(c: usize) -> Vec<ClientRequest> {
    let wait = Some(Duration::from_secs(3600));
    match c {
        0 => vec![
            ClientRequest::Publish {
                key: "k".into(),
                value: "v".into(),
            },
            ClientRequest::Publish {
                key: "mpi://app/g:accept".into(),
                value: "x".into(),
            },
            ClientRequest::Unpublish { key: "k".into() },
        ],
        _ => vec![ClientRequest::Lookup {
            key: "k".into(),
            wait,
        }],
    }
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NamesState {
    /// The guest job's master.
    pub guest: Master,
    /// The serving job's master.
    pub serving: Master,
    /// Requests on their way to the serving job: (ticket, request).
    pub to_serving: Vec<(u64, ClientRequest)>,
    /// Answers on their way back: (ticket, answer).
    pub to_guest: Vec<(u64, ClientReply)>,
    /// Each client's next request in its script.
    pub next: [usize; 3],
    /// Each client's answers, by request id (its index in the script).
    pub answers: BTreeMap<(usize, usize), Vec<ClientReply>>,
    /// Tickets the guest forwarded.
    pub forwarded: Vec<u64>,
    /// A request with a reserved key left the guest job.
    pub leaked: bool,
}

/// What can happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NamesAction {
    /// Client `c` sends its next request.
    Ask(usize),
    /// The `i`th request in flight reaches the serving job.
    Deliver(usize),
    /// The `i`th request in flight is lost: the guest's driver reports no answer.
    LoseRequest(usize),
    /// The `i`th answer in flight reaches the guest job.
    Answer(usize),
    /// The `i`th answer in flight is lost: the guest's driver reports no answer.
    LoseAnswer(usize),
    /// The `i`th answer arrives as a reply of another kind.
    Garble(usize),
}

/// One configuration.
#[derive(Clone, Debug)]
pub struct NamesConfig {
    /// Name in the table and the golden file.
    pub name: &'static str,
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
}

fn master(job: &str, data_server: DataServer, bugs: Bugs) -> Master {
    let mut m = Master::new(MasterConfig {
        namespace: Namespace::new(job),
        nodes: vec![NodeSpec {
            name: "n0".into(),
            slots: 2,
        }],
        apps: vec![(job.into(), 2)],
        change_timeout: Duration::from_secs(30),
        grace: Duration::from_secs(5),
        max_queued: 1,
        grow_wait: None,
        data_server,
    })
    .expect("a valid job");
    m.plant(bugs);
    // The start's messages to the daemon are not this model's business.
    while m.poll_output().is_some() {}
    m
}

fn is_reserved(r: &ClientRequest) -> bool {
    matches!(r, ClientRequest::Publish { key, .. } if key.ends_with(":accept"))
}

impl NamesConfig {
    /// Feeds `input` to `job`'s master and carries out what it asks.
    fn feed(&self, s: &mut NamesState, job: Job, input: MasterInput) {
        let m = match job {
            Job::Guest => &mut s.guest,
            Job::Serving => &mut s.serving,
        };
        let _ = m.handle(Instant(0), input);
        let mut out = Vec::new();
        while let Some(o) = m.poll_output() {
            out.push(o);
        }
        for o in out {
            match o {
                MasterOutput::Send(env) => {
                    if let ToDaemon::Reply { to, req, reply } = env.msg {
                        let c = CLIENTS
                            .iter()
                            .position(|(j, r)| *j == job && to.rank == *r)
                            .expect("a client");
                        s.answers.entry((c, req as usize)).or_default().push(reply);
                    }
                }
                MasterOutput::ForwardData { ticket, request } => {
                    s.leaked |= is_reserved(&request);
                    s.forwarded.push(ticket);
                    s.to_serving.push((ticket, request));
                }
                MasterOutput::GuestReply { ticket, reply } => s.to_guest.push((ticket, reply)),
                _ => {}
            }
        }
    }
}

impl Model for NamesConfig {
    type State = NamesState;
    type Action = NamesAction;

    fn init_states(&self) -> Vec<NamesState> {
        vec![NamesState {
            guest: master("g", DataServer::Forwarded, self.bugs),
            serving: master("s", DataServer::Own, self.bugs),
            to_serving: Vec::new(),
            to_guest: Vec::new(),
            next: [0; 3],
            answers: BTreeMap::new(),
            forwarded: Vec::new(),
            leaked: false,
        }]
    }

    fn actions(&self, s: &NamesState, out: &mut Vec<NamesAction>) {
        for c in 0..CLIENTS.len() {
            let n = s.next[c];
            // One request at a time: the next once the last is answered.
            let answered = n == 0 || s.answers.contains_key(&(c, n - 1));
            if n < script(c).len() && answered {
                out.push(NamesAction::Ask(c));
            }
        }
        for i in 0..s.to_serving.len() {
            out.push(NamesAction::Deliver(i));
            out.push(NamesAction::LoseRequest(i));
        }
        for i in 0..s.to_guest.len() {
            out.push(NamesAction::Answer(i));
            out.push(NamesAction::LoseAnswer(i));
            out.push(NamesAction::Garble(i));
        }
    }

    fn next_state(&self, last: &NamesState, a: NamesAction) -> Option<NamesState> {
        let mut s = last.clone();
        match a {
            NamesAction::Ask(c) => {
                let (job, rank) = CLIENTS[c];
                let req = s.next[c];
                s.next[c] += 1;
                let request = script(c)[req].clone();
                let ns = Namespace::new(match job {
                    Job::Guest => "g",
                    Job::Serving => "s",
                });
                let msg = ToMaster::Forward {
                    from: ProcessId::new(ns, rank),
                    req: req as u64,
                    request,
                };
                let node = dynres_core::rc::NodeId(0);
                self.feed(&mut s, job, MasterInput::FromDaemon { node, msg });
            }
            NamesAction::Deliver(i) => {
                let (ticket, request) = s.to_serving.remove(i);
                self.feed(&mut s, Job::Serving, MasterInput::Guest { ticket, request });
            }
            NamesAction::LoseRequest(i) => {
                let (ticket, _) = s.to_serving.remove(i);
                let reply = None;
                self.feed(&mut s, Job::Guest, MasterInput::Forwarded { ticket, reply });
            }
            NamesAction::Answer(i) => {
                let (ticket, reply) = s.to_guest.remove(i);
                let reply = Some(reply);
                self.feed(&mut s, Job::Guest, MasterInput::Forwarded { ticket, reply });
            }
            NamesAction::LoseAnswer(i) => {
                let (ticket, _) = s.to_guest.remove(i);
                let reply = None;
                self.feed(&mut s, Job::Guest, MasterInput::Forwarded { ticket, reply });
            }
            NamesAction::Garble(i) => {
                let (ticket, _) = s.to_guest.remove(i);
                let reply = Some(ClientReply::Fence(Ok(())));
                self.feed(&mut s, Job::Guest, MasterInput::Forwarded { ticket, reply });
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "NAMES-1 no reserved key leaves the guest job",
                |_, s: &NamesState| !s.leaked,
            ),
            Property::always(
                "NAMES-3 each request is answered at most once, in its kind",
                |_, s: &NamesState| {
                    s.answers.iter().all(|((c, req), answers)| {
                        let kind = |r: &ClientReply| core::mem::discriminant(r);
                        let want = match &script(*c)[*req] {
                            ClientRequest::Lookup { .. } => {
                                kind(&ClientReply::Lookup(Ok(String::new())))
                            }
                            ClientRequest::Unpublish { .. } => {
                                kind(&ClientReply::Unpublished(Ok(())))
                            }
                            _ => kind(&ClientReply::Published(Ok(()))),
                        };
                        answers.len() == 1 && kind(&answers[0]) == want
                    })
                },
            ),
            Property::always(
                "NAMES-3 with nothing in flight every guest's publish and unpublish is answered",
                |_, s: &NamesState| {
                    !(s.to_serving.is_empty() && s.to_guest.is_empty())
                        || (0..CLIENTS.len()).all(|c| {
                            CLIENTS[c].0 == Job::Serving
                                || (0..s.next[c]).all(|r| {
                                    s.answers.contains_key(&(c, r))
                                        || matches!(script(c)[r], ClientRequest::Lookup { .. })
                                })
                        })
                },
            ),
            Property::sometimes(
                "NAMES-1 the serving job's lookup finds the guest's key",
                |_, s: &NamesState| found(s, 2),
            ),
            Property::sometimes(
                "NAMES-1 the guest's lookup finds its key through the serving job",
                |_, s: &NamesState| found(s, 1),
            ),
        ]
    }
}

/// Whether client `c`'s lookup was answered with the guest's value.
fn found(s: &NamesState, c: usize) -> bool {
    s.answers
        .get(&(c, 0))
        .is_some_and(|a| a.iter().any(|r| *r == ClientReply::Lookup(Ok("v".into()))))
}

/// The PR tier's configurations.
pub fn pr_configs() -> Vec<NamesConfig> {
    vec![NamesConfig {
        name: "names-2j",
        bugs: Bugs::NONE,
    }]
}

/// Checks one configuration.
pub fn check(cfg: &NamesConfig, max_states: usize, threads: usize) -> Outcome {
    crate::run::explore_actions(cfg.name, cfg, max_states, threads)
}
