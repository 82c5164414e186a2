//! Phase 1: initiation (thesis §6.2.2, §7.4.3; `RC-2`, `RC-3`, `RC-5`, `RC-6`,
//! `RC-15`).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use super::{Change, Master, MasterOutput, Requester};
use crate::bugs::Bug;
use crate::process::ProcessId;
use crate::pset::PsetName;
use crate::rc::error::{BadRequest, RcError};
use crate::rc::msg::{ClientReply, ToDaemon};
use crate::rc::types::{
    Change as Requested, ChangeInfo, ChangeRequest, NodeId, RcStatus, RcType, Victims,
};
use crate::time::Instant;

impl Master {
    /// A change request from a client (`route`) or from outside. One change per
    /// application is undecided at a time; later ones wait in a bounded FIFO (`RC-15`).
    pub(crate) fn request_change(&mut self, now: Instant, from: Requester, req: ChangeRequest) {
        let busy = if self.bug(Bug::OneChangePerJob) {
            self.planted_any_in_flight()
        } else {
            self.in_flight.contains_key(&req.app)
        };
        if busy || self.growing(&req.app) {
            let queued = self.queue.iter().filter(|(_, r)| r.app == req.app).count();
            if queued >= self.cfg.max_queued {
                self.refuse(from, req, RcError::QueueFull(queued));
            } else {
                if let Requester::Client(r) = &from {
                    self.reply(r, ClientReply::ChangeRequested(Ok(None)));
                }
                self.queue.push_back((from, req));
            }
            return;
        }
        self.start_or_refuse(now, from, req);
    }

    /// Starts the next queued request of `app`, if any (after its change was decided).
    pub(crate) fn dequeue(&mut self, now: Instant, app: &str) {
        while !self.in_flight.contains_key(app) && !self.growing(app) {
            let next = if self.bug(Bug::DequeueNewest) {
                self.planted_newest_queued(app)
            } else {
                self.queue.iter().position(|(_, r)| r.app == app)
            };
            let Some(pos) = next else {
                return;
            };
            let Some((from, req)) = self.queue.remove(pos) else {
                return;
            };
            self.start_or_refuse(now, from, req);
        }
    }

    /// Starts a change and tells its requester the delta, or the refusal (`RC-15`: a
    /// queued request learns its outcome when it leaves the queue).
    pub(crate) fn start_or_refuse(&mut self, now: Instant, from: Requester, req: ChangeRequest) {
        match self.start_change(now, &req, from.clone()) {
            Ok(delta) => match from {
                Requester::Client(r) => {
                    self.reply(&r, ClientReply::ChangeRequested(Ok(Some(delta))));
                }
                Requester::External(ticket) => {
                    self.out.push_back(MasterOutput::Started { ticket, delta });
                }
            },
            // RC-21: a request short of slots may wait for the driver to add nodes.
            Err(e) => {
                if let Some((from, req)) = self.wait_for_slots(now, from, req, &e) {
                    self.refuse(from, req, e);
                }
            }
        }
    }

    pub(crate) fn refuse(&mut self, from: Requester, request: ChangeRequest, error: RcError) {
        tracing::debug!(?request, %error, "change refused");
        match from {
            Requester::Client(r) => self.reply(&r, ClientReply::ChangeRequested(Err(error))),
            Requester::External(ticket) => self.out.push_back(MasterOutput::Refused {
                ticket,
                request,
                error,
            }),
        }
    }

    /// Phase 1 in the thesis' order (`RC-3`): define the delta pset(s), update the job
    /// data, announce the change, and only then launch new processes. All-or-nothing:
    /// it works on copies and commits them only when every step succeeded.
    fn start_change(
        &mut self,
        now: Instant,
        req: &ChangeRequest,
        requester: Requester,
    ) -> Result<PsetName, RcError> {
        let root = PsetName::app_root(&req.app).map_err(crate::pset::PsetError::from)?;
        let app_members = self.registry.get(&root)?.members.clone();
        let kind = req.kind();
        let adds = req.change.adds();
        let victims = req.change.victims();
        let removes = victims.map_or(0, Victims::count);
        let wants_add = matches!(kind, RcType::Add | RcType::Replace);
        let wants_sub = victims.is_some();
        if (wants_add && adds == 0) || (wants_sub && removes == 0) {
            return Err(RcError::BadRequest(BadRequest::EmptyChange));
        }
        // RC-2: sizes are checked against what exists before anything is allocated for
        // them, so a request for 2^32 processes costs nothing.
        if wants_add && adds as usize > self.slots.free_count() {
            return Err(RcError::Slots(crate::slots::SlotError::Exhausted {
                wanted: adds as usize,
                free: self.slots.free_count(),
            }));
        }
        if wants_sub && removes as usize >= app_members.len() {
            return Err(RcError::BadRequest(BadRequest::RemovesWholeApplication));
        }
        // Victims: named ones must be running processes of the app (RC-5); otherwise
        // stack order among the app's processes (SLOT-2).
        let table = self.registry.table();
        let in_app = |p: &ProcessId| table.index_of(p).is_some_and(|i| app_members.contains(i));
        let removed: Vec<ProcessId> = match victims {
            None => Vec::new(),
            Some(Victims::Count(_)) => self.slots.victims_where(removes as usize, |p| in_app(p))?,
            Some(Victims::Named(named)) => {
                let named = named.as_slice();
                let distinct: BTreeSet<&ProcessId> = named.iter().collect();
                if distinct.len() != named.len() {
                    return Err(RcError::BadRequest(BadRequest::DuplicateVictim));
                }
                if let Some(p) = named
                    .iter()
                    .find(|p| !in_app(p) || !self.slots.is_running(p))
                {
                    return Err(RcError::NotPermitted(p.clone()));
                }
                named.to_vec()
            }
        };

        // Work on copies; commit at the end.
        let mut registry = self.registry.clone();
        let mut slots = self.slots.clone();
        let first_rank = if self.bug(Bug::ReuseRankAfterAbort) {
            self.planted_rank_after_abort()
        } else {
            self.next_rank
        };
        let added: Vec<ProcessId> = (0..adds)
            .map(|i| ProcessId::new(self.cfg.namespace.clone(), first_rank.saturating_add(i)))
            .collect();
        let (placed, new_nodes) = slots.place(&added)?;
        let delta = if wants_add {
            registry.define_delta(&req.app, &added)?
        } else {
            registry.define_delta(&req.app, &removed)?
        };
        let sub_delta = if kind == RcType::Replace {
            Some(registry.define_delta(&req.app, &removed)?)
        } else {
            None
        };
        // Binding (RC-6): ADD to one malleable pset, SUB to X_c(delta), REPLACE to the
        // single pset X_c(removed) names.
        let bound = match &req.change {
            Requested::Add { bound, .. } => {
                let malleable = registry.malleable(&req.app);
                let chosen = match bound {
                    Some(b) if malleable.contains(b) => b.clone(),
                    Some(_) => return Err(RcError::BadRequest(BadRequest::NotMalleable)),
                    None if malleable.contains(&root) => root.clone(),
                    None => malleable
                        .first()
                        .cloned()
                        .ok_or(RcError::BadRequest(BadRequest::NoMalleablePset))?,
                };
                alloc::vec![chosen]
            }
            Requested::Sub(_) => registry.reference_counted(&delta)?,
            Requested::Replace { .. } => {
                let xc = registry.reference_counted(sub_delta.as_ref().unwrap_or(&delta))?;
                if xc.len() != 1 {
                    return Err(RcError::BadRequest(BadRequest::ReplaceSpansPsets));
                }
                xc
            }
        };
        if bound.is_empty() {
            return Err(RcError::BadRequest(BadRequest::NothingToRemove));
        }

        // Commit.
        let snapshot = core::mem::replace(&mut self.registry, registry);
        self.slots = slots;
        self.next_rank = first_rank.saturating_add(adds);
        let procs_before = self.procs.clone();
        for p in &placed {
            self.procs.insert(p.pid.clone(), NodeId(p.node));
            self.app_of.insert(p.pid.clone(), req.app.clone());
        }
        for p in &removed {
            self.procs.remove(p);
        }
        let info = ChangeInfo {
            app: req.app.clone(),
            kind,
            delta: delta.clone(),
            sub_delta: sub_delta.clone(),
            bound,
            added: added.clone(),
            removed,
            status: RcStatus::Announced,
        };
        // RC-3, in order on every daemon's ordered link: delta pset(s), job data,
        // announcement, launch.
        self.broadcast_pset(&delta);
        if let Some(s) = &sub_delta {
            self.broadcast_pset(s);
        }
        let job_data = ToDaemon::job_data(&added, &info.removed);
        if self.bug(Bug::JobDataToLaunchNodesOnly) {
            self.per_node(&added, |_| job_data.clone());
        } else {
            self.broadcast(job_data);
        }
        if self.bug(Bug::AnnounceAfterLaunch) {
            self.launch(&added);
        }
        self.broadcast(ToDaemon::Change {
            delta: delta.clone(),
            info: Some(info.clone()),
        });
        for n in new_nodes {
            self.out.push_back(MasterOutput::NodeAllocated(NodeId(n)));
        }
        self.out.push_back(MasterOutput::Status {
            delta: delta.clone(),
            status: RcStatus::Announced,
        });
        if !self.bug(Bug::AnnounceAfterLaunch) {
            self.launch(&added);
        }
        self.in_flight.insert(req.app.clone(), delta.clone());
        self.changes.insert(
            delta.clone(),
            Change {
                info,
                snapshot,
                procs_before,
                accepted: BTreeMap::new(),
                confirmed: BTreeSet::new(),
                deadline: (kind != RcType::Sub || !self.bug(Bug::NoDeadlineForSub))
                    .then(|| now + self.cfg.change_timeout),
                grace_deadline: None,
                exited: BTreeSet::new(),
                waiters: Vec::new(),
                requester,
                done: false,
            },
        );
        tracing::debug!(%delta, ?kind, "change announced");
        Ok(delta)
    }
}

/// Planted-bug code (never run in a tested build; the mutation run leaves `planted_*`
/// functions out).
impl Master {
    /// Planted `OneChangePerJob`: any change in flight blocks every application.
    fn planted_any_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Planted `DequeueNewest`: the queue served last in, first out.
    fn planted_newest_queued(&self, app: &str) -> Option<usize> {
        self.queue.iter().rposition(|(_, r)| r.app == app)
    }

    /// Planted `ReuseRankAfterAbort`: the rank counter rolled back with the last aborted
    /// change when that change took the newest ranks.
    fn planted_rank_after_abort(&self) -> u32 {
        let first_rank = self.next_rank;
        match self
            .changes
            .values()
            .rev()
            .find(|c| c.info.status == RcStatus::Aborted)
        {
            Some(c)
                if c.info
                    .added
                    .last()
                    .is_some_and(|p| p.rank + 1 == first_rank) =>
            {
                c.info.added.first().map_or(first_rank, |p| p.rank)
            }
            _ => first_rank,
        }
    }
}
