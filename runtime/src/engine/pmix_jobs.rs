//! PMIx across two jobs that share a data server (`spec/pmi.md` PMIS-20, PMIS-21,
//! `spec/runtime.md` NAMES-1): after Open MPI's connect/accept between jobs, the new
//! communicator's fence spans processes of both. No modex can run over it (each job's
//! kernel knows its own psets only), so the fence travels through the shared data
//! server: each local participant publishes its part of this node's blob
//! (`fence::split`, tagged with a node key unique across jobs) under a key both sides
//! derive from the participants alone, and the node waits for every other
//! participant's part; `fence::join` puts the blobs back together.

use std::collections::HashMap;

use dynres_core::pmi::fence;
use dynres_core::rc::{ClientReply, ClientRequest};
use dynres_core::trace::fingerprint;
use dynres_core::{Namespace, ProcessId};
use dynres_pmix::{FenceDone, RANK_WILDCARD, Status};

use super::Engine;
use super::pmix_host::{FENCE_WAIT, Pending};
use crate::pmix::PmixHost;

/// A fence across jobs waiting for its parts (PMIS-21).
pub(super) struct CrossFence {
    /// Publications and lookups not answered yet.
    left: usize,
    /// Every participant's part, as it arrives.
    parts: Vec<(ProcessId, String)>,
    /// The answer, until given.
    done: Option<FenceDone>,
}

/// Fences across jobs: the open ones by id, and how many fences each set of
/// participants has had (both jobs count the same collective calls in the same order,
/// so the count tells the fences of one set apart on both sides).
#[derive(Default)]
pub(super) struct CrossFences {
    open: HashMap<u64, CrossFence>,
    seen: HashMap<u64, u64>,
}

/// The data server's key of one participant's part of a fence across jobs.
fn part_key(tag: &str, (ns, rank): &(String, u32)) -> String {
    format!("pmix-fx:{tag}:{ns}:{rank}")
}

impl Engine {
    /// PMIS-21: serves a fence whose participants include another job's processes;
    /// `false` if none of them is another job's (the caller serves it, PMIS-14).
    pub(super) fn pmix_cross_fence(
        &mut self,
        host: &PmixHost,
        procs: &[dynres_pmix::Proc],
        data: &[u8],
        done: FenceDone,
    ) -> Result<(), FenceDone> {
        if !procs.iter().any(|(ns, _)| host.foreign_size(ns).is_some()) {
            return Err(done);
        }
        // Every participant by name, wildcards expanded, in one order on both sides.
        let mut all: Vec<(String, u32)> = Vec::new();
        for (ns, rank) in procs {
            if *rank != RANK_WILDCARD {
                all.push((ns.clone(), *rank));
                continue;
            }
            let size = host
                .foreign_size(ns)
                .or_else(|| self.pmix_ns_size(host, ns));
            let Some(size) = size else {
                tracing::error!(%ns, "PMIx fence across jobs: a namespace of unknown size");
                done.complete(Err(Status::Error));
                return Ok(());
            };
            all.extend((0..size).map(|r| (ns.clone(), r)));
        }
        all.sort_unstable();
        all.dedup();
        let local = host.local_procs(&all);
        // A node key no other job's node has: the parts of the two jobs' node 0 must
        // not be taken for one node's.
        let node = fingerprint(&(host.namespace.as_str(), host.this_node())) as u32;
        let parts = match fence::split(node, data, local.len()) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::error!("PMIx fence across jobs: {e}");
                done.complete(Err(Status::Error));
                return Ok(());
            }
        };
        let set = fingerprint(&all);
        let seq = self.pmix_cross.seen.entry(set).or_default();
        *seq += 1;
        let tag = format!("{set:016x}.{seq}");
        let id = self.pmix_asked;
        self.pmix_asked += 1;
        let remote: Vec<&(String, u32)> = all.iter().filter(|p| !local.contains(p)).collect();
        self.pmix_cross.open.insert(
            id,
            CrossFence {
                left: local.len() + remote.len(),
                parts: Vec::new(),
                done: Some(done),
            },
        );
        for (p, part) in local.iter().zip(parts) {
            let pid = ProcessId::new(Namespace::new(p.0.clone()), p.1);
            if let Some(f) = self.pmix_cross.open.get_mut(&id) {
                f.parts.push((pid, part.clone()));
            }
            let request = ClientRequest::Publish {
                key: part_key(&tag, p),
                value: part,
            };
            self.pmix_ask(p, request, Pending::CrossFence(id, None));
        }
        let me = local.first().cloned();
        for p in remote {
            let Some(me) = &me else { break };
            let request = ClientRequest::Lookup {
                key: part_key(&tag, p),
                wait: Some(FENCE_WAIT),
            };
            let pid = ProcessId::new(Namespace::new(p.0.clone()), p.1);
            self.pmix_ask(me, request, Pending::CrossFence(id, Some(pid)));
        }
        Ok(())
    }

    /// One publication (`from` none) or one looked-up part (`from` the participant)
    /// of fence `id` across jobs: the last one answers the fence with every node's blob.
    pub(super) fn pmix_cross_part(&mut self, id: u64, from: Option<ProcessId>, reply: ClientReply) {
        let Some(f) = self.pmix_cross.open.get_mut(&id) else {
            return;
        };
        f.left = f.left.saturating_sub(1);
        let failed = match (from, reply) {
            (None, ClientReply::Published(r)) => r.err().map(|e| e.to_string()),
            (Some(pid), ClientReply::Lookup(Ok(part))) => {
                f.parts.push((pid, part));
                None
            }
            (Some(pid), ClientReply::Lookup(Err(e))) => Some(format!("{pid}'s part: {e}")),
            (_, other) => Some(format!("unexpected reply {other:?}")),
        };
        let answer = match failed {
            Some(why) => {
                tracing::error!("PMIx fence across jobs: {why}");
                Err(Status::Error)
            }
            None if f.left > 0 => return,
            None => {
                f.parts.sort();
                fence::join(&f.parts).map_err(|e| {
                    tracing::error!("PMIx fence across jobs: {e}");
                    Status::Error
                })
            }
        };
        if let Some(done) = f.done.take() {
            done.complete(answer);
        }
        if f.left == 0 {
            self.pmix_cross.open.remove(&id);
        }
    }
}
