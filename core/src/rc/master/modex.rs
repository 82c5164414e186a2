//! The master's half of the modex (`spec/resource-change.md` §8): it joins the nodes'
//! batches of one pset version and, once every member's value is in, sends the whole
//! table back once per node (`MODEX-3`). Replaces the O(n²) publish/lookup wire-up of
//! communicators: n members cost one message per node each way instead of n lookups
//! per member.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use super::Master;
use crate::bugs::Bug;
use crate::process::ProcessId;
use crate::pset::{Origin, PsetError, PsetName};
use crate::rc::error::RcError;
use crate::rc::msg::ToDaemon;
use crate::rc::types::NodeId;
use crate::time::{Duration, Instant};

/// A modex in progress over the current version of a pset.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ModexGather {
    /// The pset version the batches were gathered at.
    pub version: u64,
    /// The pset's members at that version.
    pub members: BTreeSet<ProcessId>,
    /// Values received so far.
    pub entries: BTreeMap<ProcessId, String>,
    /// Nodes whose batch arrived.
    pub nodes: BTreeSet<NodeId>,
    /// The earliest deadline of any contributor.
    pub deadline: Instant,
}

impl Master {
    /// A node's batch (`MODEX-1`..`MODEX-3`, `MODEX-6`).
    pub(crate) fn on_modex_batch(
        &mut self,
        now: Instant,
        node: NodeId,
        pset: PsetName,
        version: u64,
        timeout: Duration,
        entries: Vec<(ProcessId, String)>,
    ) {
        let current = match self.registry.get(&pset) {
            Ok(p) => p.attrs.version,
            Err(e) => return self.modex_done(node, &pset, version, Err(e.into())),
        };
        if version != current && !self.bug(Bug::ModexIgnoreVersion) {
            let err = RcError::Stale {
                pset: pset.clone(),
                version: current,
            };
            return self.modex_done(node, &pset, version, Err(err));
        }
        let members: BTreeSet<ProcessId> = self
            .registry
            .members(&Origin::Runtime, &pset)
            .unwrap_or_default()
            .into_iter()
            .collect();
        // A daemon speaks only for members placed on its own node. Where a process runs
        // is the slot map's to say: a process a SUB is removing has left the job data
        // at the announcement (phase 1) but runs, holds its slot and is still a member
        // of this version until the pset operation.
        let placed = |p: &ProcessId| {
            if self.bug(Bug::ModexNodeFromJobData) {
                return self.procs.get(p).map(|n| n.0);
            }
            self.slots.slot_of(p).and_then(|s| self.slots.node_of(s))
        };
        if let Some((p, _)) = entries
            .iter()
            .find(|(p, _)| !members.contains(p) || placed(p).is_some_and(|n| n != node.0))
        {
            let err = RcError::NotPermitted(p.clone());
            return self.modex_done(node, &pset, version, Err(err));
        }
        // A member that contributed and exited before its node's batch arrived is lost
        // for this modex too (MODEX-4): its value names a dead process.
        if let Some((p, _)) = entries.iter().find(|(p, _)| placed(p).is_none()) {
            let err = RcError::ProcessLost(p.clone());
            self.modex_done(node, &pset, version, Err(err.clone()));
            return self.fail_modex(&pset, err);
        }
        // So is a member lost before any batch arrived (no modex was waiting for it
        // then): the modex can never complete.
        // The batch's members as a set: the scan below asks of every member of the
        // pset, and a scan of the batch each time made a node's batch cost
        // O(members × batch), O(n²) over a modex of n (issue 29).
        let batch: BTreeSet<&ProcessId> = entries.iter().map(|(p, _)| p).collect();
        let dead = members
            .iter()
            .find(|m| placed(m).is_none() && !batch.contains(m));
        let dead = dead.cloned();
        let g = self
            .modexes
            .entry(pset.clone())
            .or_insert_with(|| ModexGather {
                version,
                members,
                entries: BTreeMap::new(),
                nodes: BTreeSet::new(),
                deadline: now + timeout,
            });
        g.nodes.insert(node);
        g.entries.extend(entries);
        g.deadline = g.deadline.min(now + timeout);
        if let Some(p) = dead.filter(|p| !g.entries.contains_key(p)) {
            return self.fail_modex(&pset, RcError::ProcessLost(p));
        }
        // As for fences: the full check only once enough values are in.
        if g.entries.len() >= g.members.len() && g.members.iter().all(|m| g.entries.contains_key(m))
        {
            let g = self.modexes.remove(&pset).expect("present");
            let table: Vec<(ProcessId, String)> = g
                .entries
                .into_iter()
                .filter(|(p, _)| g.members.contains(p))
                .collect();
            let mut nodes = g.nodes;
            if self.bug(Bug::ModexAnswerLastNodeOnly) {
                planted_last_node_only(&mut nodes, node);
            }
            for n in nodes {
                self.modex_done(n, &pset, g.version, Ok(table.clone()));
            }
        }
    }

    fn modex_done(
        &mut self,
        node: NodeId,
        pset: &PsetName,
        version: u64,
        result: Result<Vec<(ProcessId, String)>, RcError>,
    ) {
        self.send(
            node,
            ToDaemon::ModexDone {
                pset: pset.clone(),
                version,
                result,
            },
        );
    }

    /// Fails the modex over `pset`: every node with a member or a batch hears it once,
    /// so a daemon still gathering stops too (`MODEX-4`, `MODEX-5`).
    fn fail_modex(&mut self, pset: &PsetName, err: RcError) {
        let Some(g) = self.modexes.remove(pset) else {
            return;
        };
        let mut nodes = g.nodes;
        if !self.bug(Bug::ModexFailBatchNodesOnly) {
            nodes.extend(g.members.iter().filter_map(|m| self.procs.get(m).copied()));
        }
        for n in nodes {
            self.modex_done(n, pset, g.version, Err(err.clone()));
        }
    }

    /// After every step: a modex whose pset changed version (or was pruned) can never
    /// complete as gathered, so it fails with `Stale` and its members ask again at the
    /// new version (`MODEX-2`).
    pub(crate) fn recheck_modexes(&mut self) {
        let stale: Vec<(PsetName, RcError)> = self
            .modexes
            .iter()
            .filter_map(|(name, g)| match self.registry.get(name) {
                Ok(p) if p.attrs.version == g.version => None,
                Ok(p) => Some((
                    name.clone(),
                    RcError::Stale {
                        pset: name.clone(),
                        version: p.attrs.version,
                    },
                )),
                Err(_) => Some((name.clone(), PsetError::NotFound(name.clone()).into())),
            })
            .collect();
        for (name, err) in stale {
            self.fail_modex(&name, err);
        }
    }

    /// A lost process that had not contributed fails every modex waiting for it
    /// (`MODEX-4`, `RC-18`).
    pub(crate) fn modex_lost(&mut self, pid: &ProcessId) {
        let stuck: Vec<PsetName> = self
            .modexes
            .iter()
            .filter(|(_, g)| g.members.contains(pid) && !g.entries.contains_key(pid))
            .map(|(n, _)| n.clone())
            .collect();
        for name in stuck {
            self.fail_modex(&name, RcError::ProcessLost(pid.clone()));
        }
    }

    /// Modexes past their deadline fail with `Timeout` (`MODEX-5`).
    pub(crate) fn expire_modexes(&mut self, now: Instant) {
        let due: Vec<PsetName> = self
            .modexes
            .iter()
            .filter(|(_, g)| g.deadline <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.fail_modex(&name, RcError::Timeout);
        }
    }
}

/// Planted bug `ModexAnswerLastNodeOnly`: only the node whose batch completed the modex
/// gets the table (see `planted_some_confirmed` in `phase3.rs` for the naming).
fn planted_last_node_only(nodes: &mut BTreeSet<NodeId>, last: NodeId) {
    nodes.retain(|n| *n == last);
}
