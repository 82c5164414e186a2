//! The daemon's half of the modex (`spec/resource-change.md` §8): gather the values of
//! this node's members of a pset, send them to the master in one message, and hand every
//! local member the job-wide result when the master's one reply comes back.
//!
//! A gather is keyed by the pset *and* the version the replica held when its first
//! member arrived, so members that saw different versions never mix (`MODEX-2`).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use super::{Daemon, DaemonOutput, Gather};
use crate::bugs::Bug;
use crate::process::ProcessId;
use crate::pset::{PsetError, PsetName};
use crate::rc::error::{BadRequest, RcError};
use crate::rc::msg::{ClientReply, ModexData, ToMaster};
use crate::rc::types::ReqId;
use crate::time::{Duration, Instant};

impl Daemon {
    /// A local member contributes its value (`MODEX-1`).
    pub(super) fn modex(
        &mut self,
        now: Instant,
        from: ProcessId,
        req: ReqId,
        pset: PsetName,
        data: String,
        timeout: Duration,
    ) {
        let Some((members, attrs)) = self.psets.get(&pset) else {
            let err = PsetError::NotFound(pset).into();
            return self.answer(&from, req, Err(err));
        };
        if !members.contains(&from) {
            let err = RcError::NotPermitted(from.clone());
            return self.answer(&from, req, Err(err));
        }
        let key = (pset, attrs.version);
        let local: BTreeSet<ProcessId> =
            members.iter().filter(|m| self.local.contains(m)).collect();
        let gather = self.gathers.entry(key.clone()).or_insert_with(|| Gather {
            members: local,
            arrived: BTreeMap::new(),
            deadline: now + timeout,
            forwarded: false,
        });
        if gather.arrived.contains_key(&from) || gather.forwarded {
            let err = RcError::BadRequest(BadRequest::AlreadyInModex);
            return self.answer(&from, req, Err(err));
        }
        gather.arrived.insert(from.clone(), (req, data.clone()));
        gather.deadline = gather.deadline.min(now + timeout);
        if self.bugs.has(Bug::ModexPartialBatch) {
            // Planted: every contribution travels on its own.
            let msg = ToMaster::Modex {
                pset: key.0.clone(),
                version: key.1,
                timeout,
                entries: alloc::vec![(from, data)],
            };
            self.out.push_back(DaemonOutput::ToMaster(msg));
            if gather
                .members
                .iter()
                .all(|m| gather.arrived.contains_key(m))
            {
                gather.forwarded = true;
            }
            return;
        }
        self.forward_if_complete(now, &key);
    }

    /// Sends the node's batch once every local member is in (`MODEX-1`: exactly once).
    fn forward_if_complete(&mut self, now: Instant, key: &(PsetName, u64)) {
        let Some(g) = self.gathers.get_mut(key) else {
            return;
        };
        if g.forwarded || !g.members.iter().all(|m| g.arrived.contains_key(m)) {
            return;
        }
        g.forwarded = true;
        let entries = g
            .arrived
            .iter()
            .map(|(p, (_, v))| (p.clone(), v.clone()))
            .collect();
        let timeout = Duration::from_nanos(g.deadline.as_nanos().saturating_sub(now.as_nanos()));
        self.out.push_back(DaemonOutput::ToMaster(ToMaster::Modex {
            pset: key.0.clone(),
            version: key.1,
            timeout,
            entries,
        }));
    }

    /// The master's outcome: every waiting local member gets it (`MODEX-3`). An outcome
    /// for a gather this daemon already ended (timed out, failed) is dropped.
    pub(super) fn modex_done(
        &mut self,
        pset: &PsetName,
        version: u64,
        result: Result<Vec<(ProcessId, String)>, RcError>,
    ) {
        let Some(g) = self.gathers.remove(&(pset.clone(), version)) else {
            return;
        };
        let result = result.map(|entries| ModexData { version, entries });
        for (pid, (req, _)) in g.arrived {
            self.answer(&pid, req, result.clone());
        }
    }

    /// A pset was redefined or pruned: a gather of another version that has not gone to
    /// the master can never complete, so its members are told to ask again (`MODEX-2`).
    /// Forwarded gathers wait for the master, which fails them itself.
    pub(super) fn modex_pset_changed(&mut self, pset: &PsetName) {
        if self.bugs.has(Bug::ModexKeepStaleGather) {
            return;
        }
        let current = self.psets.get(pset).map(|(_, a)| a.version);
        let dead: Vec<(PsetName, u64)> = self
            .gathers
            .iter()
            .filter(|((p, v), g)| p == pset && !g.forwarded && Some(*v) != current)
            .map(|(k, _)| k.clone())
            .collect();
        for key in dead {
            let err = match current {
                Some(version) => RcError::Stale {
                    pset: pset.clone(),
                    version,
                },
                None => PsetError::NotFound(pset.clone()).into(),
            };
            self.fail_gather(&key, err);
        }
    }

    /// A local member exited before it contributed: the modex cannot complete
    /// (`MODEX-4`). The master hears of the exit and fails its side.
    pub(super) fn modex_member_gone(&mut self, pid: &ProcessId) {
        let dead: Vec<(PsetName, u64)> = self
            .gathers
            .iter()
            .filter(|(_, g)| !g.forwarded && g.members.contains(pid))
            .filter(|(_, g)| !g.arrived.contains_key(pid))
            .map(|(k, _)| k.clone())
            .collect();
        for key in dead {
            self.fail_gather(&key, RcError::ProcessLost(pid.clone()));
        }
    }

    /// Gathers still incomplete here at their deadline fail with `Timeout` (`MODEX-5`).
    pub(super) fn expire_gathers(&mut self, now: Instant) {
        let due: Vec<(PsetName, u64)> = self
            .gathers
            .iter()
            .filter(|(_, g)| !g.forwarded && g.deadline <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.fail_gather(&key, RcError::Timeout);
        }
    }

    fn fail_gather(&mut self, key: &(PsetName, u64), err: RcError) {
        if let Some(g) = self.gathers.remove(key) {
            for (pid, (req, _)) in g.arrived {
                self.answer(&pid, req, Err(err.clone()));
            }
        }
    }

    fn answer(&mut self, to: &ProcessId, req: ReqId, result: Result<ModexData, RcError>) {
        self.out.push_back(DaemonOutput::ToClient {
            to: to.clone(),
            req,
            reply: ClientReply::Modex(result),
        });
    }
}
