//! Phase 3 and the end of a change: accept, confirm, the decision, rollback, exits and
//! the grace period (thesis §6.4.2, §7.4.3; `RC-1`, `RC-7`..`RC-13`).

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::{Change, Master, MasterOutput, Route, Waiter};
use crate::bugs::Bug;
use crate::process::ProcessId;
use crate::pset::PsetName;
use crate::rc::error::{BadRequest, MasterRejection, RcError};
use crate::rc::msg::{ClientReply, ToDaemon};
use crate::rc::types::{AbortReason, AcceptOutcome, NodeId, RcStatus, RcType};
use crate::time::{Duration, Instant};

/// The data-server key under which the accept root's new pset is published.
pub fn accept_key(delta: &PsetName) -> String {
    alloc::format!("{delta}:accept")
}

/// The data-server key under which the decision is published ("success"/"failure").
pub fn confirm_key(delta: &PsetName) -> String {
    alloc::format!("{delta}:confirm")
}

impl Master {
    /// The root of a bound pset accepts (Lst. 6.5). Validates the accept (`RC-8`),
    /// records it once per bound pset, publishes `{delta}:accept` for new processes, and
    /// answers at once or, blocking, at the decision or `wait`.
    pub(crate) fn accept(
        &mut self,
        now: Instant,
        route: Route,
        delta: PsetName,
        new_pset: PsetName,
        bound: Option<PsetName>,
        wait: Option<Duration>,
    ) {
        match self.check_accept(&route.pid, &delta, &new_pset, bound) {
            Err(e) => self.reply(&route, ClientReply::Accept(Err(e))),
            Ok(None) => {
                // Already decided: report it (polling accept).
                let reply = self.accept_reply(&delta, &new_pset);
                self.reply(&route, ClientReply::Accept(reply));
            }
            Ok(Some(bound)) => {
                let change = self.changes.get_mut(&delta).expect("checked");
                let first = change.accepted.is_empty();
                change
                    .accepted
                    .entry(bound)
                    .or_insert_with(|| new_pset.clone());
                let all_in = change.accepted.len() == change.info.bound.len()
                    || self.bugs.has(Bug::FinalizeSubOnFirstAccept);
                let kind = change.info.kind;
                if first {
                    self.set_status(&delta, RcStatus::Pending);
                    if kind != RcType::Sub {
                        let key = accept_key(&delta);
                        let _ = self.publish(now, &key, String::from(new_pset.as_str()), false);
                    }
                }
                // SUB is decided by its accepts alone: one per X_c(U) member (RC-8).
                let planted = self.bug(Bug::FinalizeOnAccept) && planted_finalizes_on_accept(kind);
                let waits = self.bug(Bug::SubWaitsForExits);
                if (kind == RcType::Sub && all_in && !waits) || planted {
                    self.finalize(now, &delta);
                } else if kind != RcType::Sub {
                    self.maybe_finalize(now, &delta);
                }
                match wait {
                    Some(w) if !self.status(&delta).is_final() => {
                        let deadline = now + w;
                        let change = self.changes.get_mut(&delta).expect("checked");
                        change
                            .waiters
                            .push((route, Waiter::Accept { new_pset, deadline }));
                    }
                    _ => {
                        let reply = self.accept_reply(&delta, &new_pset);
                        self.reply(&route, ClientReply::Accept(reply));
                    }
                }
            }
        }
    }

    /// `Ok(Some(bound))` for an accept to record, `Ok(None)` if the change is already
    /// decided, `Err` for an invalid accept (`RC-8`).
    fn check_accept(
        &self,
        pid: &ProcessId,
        delta: &PsetName,
        new_pset: &PsetName,
        bound: Option<PsetName>,
    ) -> Result<Option<PsetName>, RcError> {
        let change = self
            .changes
            .get(delta)
            .ok_or_else(|| RcError::NoSuchChange(delta.clone()))?;
        if self.app_of.get(pid) != Some(&change.info.app) {
            return Err(RcError::NotPermitted(pid.clone()));
        }
        // RC-13: a decided change answers with its decision before anything is checked:
        // an accept that raced an abort would fail against the rolled-back psets.
        let decided = change.info.status.is_final();
        if decided && !self.bug(Bug::ValidateAcceptBeforeDecision) {
            return Ok(None);
        }
        let bound = match bound {
            Some(b) => b,
            None if change.info.bound.len() == 1 => change.info.bound[0].clone(),
            None => {
                return Err(RcError::BadRequest(BadRequest::AmbiguousBound));
            }
        };
        if !change.info.bound.contains(&bound) {
            return Err(RcError::NotBound {
                delta: delta.clone(),
                bound,
            });
        }
        let origin = self.origin(pid);
        let members = |n: &PsetName| self.registry.members(&origin, n);
        if !members(&bound)?.contains(pid)
            && !change.snapshot.members(&origin, &bound)?.contains(pid)
        {
            return Err(RcError::NotPermitted(pid.clone()));
        }
        let new_members = members(new_pset)?;
        let mismatch = |why| RcError::NewPsetMismatch {
            delta: delta.clone(),
            new_pset: new_pset.clone(),
            why,
        };
        let lacks_added = change.info.added.iter().any(|p| !new_members.contains(p));
        if lacks_added && !self.bug(Bug::AcceptChecksRemovedOnly) {
            return Err(mismatch("it lacks an added process"));
        }
        if change.info.removed.iter().any(|p| new_members.contains(p)) {
            return Err(mismatch("it still holds a removed process"));
        }
        if decided {
            // Planted `ValidateAcceptBeforeDecision` only: checked, then answered.
            return Ok(None);
        }
        Ok(Some(bound))
    }

    fn accept_reply(
        &self,
        delta: &PsetName,
        new_pset: &PsetName,
    ) -> Result<AcceptOutcome, RcError> {
        let change = self
            .changes
            .get(delta)
            .ok_or_else(|| RcError::NoSuchChange(delta.clone()))?;
        if change.info.status == RcStatus::Aborted {
            return Err(RcError::Aborted(delta.clone()));
        }
        let new_pset = change
            .accepted
            .values()
            .find(|n| *n == new_pset)
            .or_else(|| change.accepted.values().next())
            .cloned()
            .unwrap_or_else(|| new_pset.clone());
        Ok(AcceptOutcome {
            status: change.info.status,
            new_pset,
            removed: change.info.removed.clone(),
        })
    }

    /// A new process confirms (Lst. 6.6) after its lookup and fence; `ok = false` aborts
    /// the change. The reply waits for the decision (`RC-9`).
    pub(crate) fn confirm(&mut self, now: Instant, route: Route, delta: PsetName, ok: bool) {
        let answer_now = ok && self.bug(Bug::ConfirmAnsweredAtOnce);
        let Some(change) = self.changes.get_mut(&delta) else {
            self.reply(
                &route,
                ClientReply::Confirmed(Err(RcError::NoSuchChange(delta))),
            );
            return;
        };
        // RC-9: only the processes the change added confirm it; a confirm from anyone
        // else is refused before it can count or abort anything. (Planted: the accept's
        // check, the caller's application, used instead.)
        let permitted = if self.bugs.has(Bug::ConfirmFromAnyMember) {
            planted_member_of_app(&self.app_of, &route.pid, &change.info.app)
        } else {
            change.info.added.contains(&route.pid)
        };
        if !permitted {
            let err = RcError::NotPermitted(route.pid.clone());
            self.reply(&route, ClientReply::Confirmed(Err(err)));
            return;
        }
        match change.info.status {
            RcStatus::Finalized => return self.reply(&route, ClientReply::Confirmed(Ok(()))),
            RcStatus::Aborted => {
                return self.reply(&route, ClientReply::Confirmed(Err(RcError::Aborted(delta))));
            }
            _ => {}
        }
        if !answer_now {
            change.waiters.push((route.clone(), Waiter::Confirm));
        }
        if !ok {
            self.abort(now, &delta, AbortReason::ConfirmFailed);
            return;
        }
        change.confirmed.insert(route.pid.clone());
        if answer_now {
            self.reply(&route, ClientReply::Confirmed(Ok(())));
        }
        if !self.bug(Bug::ConfirmDoesNotDecide) {
            self.maybe_finalize(now, &delta);
        }
    }

    /// ADD/REPLACE: FINALIZED once the accept is in and every new process confirmed
    /// (`RC-9`).
    fn maybe_finalize(&mut self, now: Instant, delta: &PsetName) {
        let Some(change) = self.changes.get(delta) else {
            return;
        };
        let all_in = if self.bug(Bug::FinalizeOnFirstConfirm) {
            planted_some_confirmed(change)
        } else {
            change
                .info
                .added
                .iter()
                .all(|p| change.confirmed.contains(p))
        };
        let ready =
            change.info.status == RcStatus::Pending && !change.accepted.is_empty() && all_in;
        if ready {
            self.finalize(now, delta);
        }
    }

    /// The decision FINALIZED (`RC-1`, `RC-11`): the job data is committed, the change
    /// is no longer queryable, removed processes are marked leaving and get `grace` to
    /// exit, and the application's next queued change may start.
    pub(crate) fn finalize(&mut self, now: Instant, delta: &PsetName) {
        self.set_status(delta, RcStatus::Finalized);
        let _ = self.publish(now, &confirm_key(delta), String::from("success"), false);
        let keep_deadline = self.bug(Bug::DeadlineKeptOnFinalize);
        let Some(change) = self.changes.get_mut(delta) else {
            return;
        };
        if !keep_deadline {
            change.deadline = None;
        }
        let removed = change.info.removed.clone();
        let added = change.info.added.clone();
        let app = change.info.app.clone();
        if !removed.is_empty() {
            change.grace_deadline = Some(now + self.cfg.grace);
        }
        self.answer_waiters(delta);
        // Removed processes keep their slots until they exit (SLOT-3).
        let still_running: Vec<ProcessId> = removed
            .iter()
            .filter(|p| self.slots.is_running(p))
            .cloned()
            .collect();
        if self.bug(Bug::FreeSlotBeforeExit) {
            for p in &still_running {
                let _ = self.slots.free(p);
            }
        }
        let _ = self.slots.mark_leaving(&still_running);
        // WORLD follows the job (runtime-managed, PSET-13).
        self.update_world(delta, &added, &removed);
        self.broadcast(ToDaemon::Change {
            delta: delta.clone(),
            info: None,
        });
        self.in_flight.remove(&app);
        self.forget_if_done(delta);
        if !self.bug(Bug::NoDequeueOnFinalize) {
            self.dequeue(now, &app);
        }
    }

    fn update_world(&mut self, delta: &PsetName, added: &[ProcessId], removed: &[ProcessId]) {
        let world = PsetName::world();
        let epoch = self.registry.get(delta).map_or(0, |p| p.attrs.epoch);
        let Ok(current) = self.registry.get(&world).map(|p| p.members.clone()) else {
            return;
        };
        let (Ok(add), Ok(sub)) = (
            self.registry.intern_all(added),
            self.registry.intern_all(removed),
        ) else {
            return;
        };
        let next = current.union(&add).difference(&sub);
        if self
            .registry
            .runtime_set_members(&world, next, epoch)
            .is_ok()
        {
            self.broadcast_pset(&world);
        }
    }

    /// The decision ABORTED (`RC-1`, `RC-12`): added processes are killed, job data
    /// and the application's psets go back to the snapshot, waiters learn it, and the
    /// change stays queryable until its added processes have exited.
    pub(crate) fn abort(&mut self, now: Instant, delta: &PsetName, why: AbortReason) {
        let Some(change) = self.changes.get(delta) else {
            return;
        };
        if change.info.status.is_final() {
            return;
        }
        tracing::debug!(%delta, %why, "change aborted");
        // The reason first, so that whoever waits for the status has it (RC-12).
        self.out.push_back(MasterOutput::Aborted {
            delta: delta.clone(),
            reason: why,
        });
        self.set_status(delta, RcStatus::Aborted);
        let _ = self.publish(now, &confirm_key(delta), String::from("failure"), false);
        let change = self.changes.get_mut(delta).expect("present");
        change.deadline = None;
        let (app, added, removed) = (
            change.info.app.clone(),
            change.info.added.clone(),
            change.info.removed.clone(),
        );
        let snapshot = change.snapshot.clone();
        let procs_before = change.procs_before.clone();
        if self.bug(Bug::AbortRestoresWholeJobData) {
            self.procs = procs_before.clone();
        } else if !self.bug(Bug::SkipJobDataRollback) {
            // Undo this change's own edits only: restoring the whole snapshot would also
            // drop what another application (a spawn, SPAWN-17) added since.
            for p in &added {
                self.procs.remove(p);
            }
            for p in &removed {
                if let Some(node) = procs_before.get(p) {
                    self.procs.insert(p.clone(), *node);
                }
            }
        }
        // Processes lost since the snapshot (RC-17) stay lost.
        let slots = &self.slots;
        self.procs.retain(|p, _| slots.slot_of(p).is_some());
        // The application's psets: membership as before, as new versions; psets made
        // since, pruned. Other applications' psets and WORLD stay as they are: they may
        // have changed since the snapshot by changes of their own (RC-12).
        let report = if self.bug(Bug::SkipRollback) {
            crate::pset::RollbackReport::default()
        } else {
            self.registry.roll_back_app(&snapshot, &app)
        };
        if self.bug(Bug::RollbackOldVersions) {
            for name in &report.restored {
                if let Ok(v) = snapshot.get(name).map(|p| p.attrs.version) {
                    self.registry.force_version(name, v);
                }
            }
        }
        let replicate = !self.bug(Bug::NoBroadcastOnRollback);
        for name in report.restored.iter().chain(&report.pruned) {
            if replicate {
                self.broadcast_pset(name);
            }
        }
        self.broadcast(ToDaemon::job_data(&removed, &added));
        let info = self.changes.get(delta).map(|c| c.info.clone());
        self.broadcast(ToDaemon::Change {
            delta: delta.clone(),
            info,
        });
        // Added processes are killed; their slots are freed when they have exited.
        let running: Vec<ProcessId> = added
            .iter()
            .filter(|p| self.slots.is_running(p))
            .cloned()
            .collect();
        let _ = self.slots.mark_leaving(&running);
        if !self.bug(Bug::NoKillOnAbort) {
            self.kill(&running);
        }
        self.fail_waiting_on(delta);
        self.answer_waiters(delta);
        self.in_flight.remove(&app);
        self.forget_if_done(delta);
        if !self.bug(Bug::NoDequeueOnFinalize) {
            self.dequeue(now, &app);
        }
    }

    /// Replies to every blocking accept and confirm of a decided change.
    fn answer_waiters(&mut self, delta: &PsetName) {
        let Some(change) = self.changes.get_mut(delta) else {
            return;
        };
        let waiters = core::mem::take(&mut change.waiters);
        let status = change.info.status;
        for (route, w) in waiters {
            let reply = match w {
                Waiter::Accept { new_pset, .. } => {
                    ClientReply::Accept(self.accept_reply(delta, &new_pset))
                }
                Waiter::Confirm if status == RcStatus::Finalized => ClientReply::Confirmed(Ok(())),
                Waiter::Confirm => ClientReply::Confirmed(Err(RcError::Aborted(delta.clone()))),
            };
            self.reply(&route, reply);
        }
    }

    pub(crate) fn set_status(&mut self, delta: &PsetName, status: RcStatus) {
        let Some(change) = self.changes.get_mut(delta) else {
            return;
        };
        // RC-1: the only legal steps; anything else is a kernel bug, never peer input.
        debug_assert!(
            change.info.status.may_become(status),
            "{:?} -> {status:?}",
            change.info.status
        );
        if !change.info.status.may_become(status) {
            return;
        }
        change.info.status = status;
        self.out.push_back(MasterOutput::Status {
            delta: delta.clone(),
            status,
        });
        if !status.is_final() {
            let info = change.info.clone();
            self.broadcast(ToDaemon::Change {
                delta: delta.clone(),
                info: Some(info),
            });
        }
    }

    /// A process exited: its slot is freed (`SLOT-3`). The exit is one the protocol
    /// expects when the process is being removed — a removed process of a FINALIZED
    /// change, an added process of an ABORTED one — and is then noted against that
    /// change. An added process of an undecided change aborts it (`RC-10`). Any other
    /// exit is a loss (`RC-18`). Only changes still waiting for their processes are
    /// searched, so an exit is never filed against an old change that merely names the
    /// process.
    pub(crate) fn on_exit(&mut self, now: Instant, pid: &ProcessId) {
        self.fail_unstarted_spawn(pid);
        if let Ok(Some(node)) = self.slots.free(pid) {
            self.out
                .push_back(MasterOutput::NodeReleased(crate::rc::types::NodeId(node)));
        }
        let owner = if self.bug(Bug::MisattributeExit) {
            planted_misattributed_owner(&self.changes, pid)
        } else {
            self.changes
                .iter()
                .filter(|(_, c)| !c.done)
                .find(|(_, c)| {
                    let i = &c.info;
                    match i.status {
                        RcStatus::Finalized => i.removed.contains(pid),
                        _ => i.added.contains(pid),
                    }
                })
                .map(|(d, c)| (d.clone(), c.info.status))
        };
        match owner {
            Some((delta, status)) => {
                if !status.is_final() {
                    self.abort(now, &delta, AbortReason::NewProcessExited);
                }
                self.note_exit(&delta, pid);
            }
            None => self.lose(now, pid),
        }
        self.spawn_child_exited(pid);
        // A dead process sends nothing more: it no longer needs an identity here.
        if !self.procs.contains_key(pid) {
            self.app_of.remove(pid);
        }
    }

    /// `RC-18`: a process of the job exited without the protocol removing it. It leaves
    /// the job data, its application's undecided change is aborted (it can no longer
    /// be applied as announced), fences that wait for it fail at once, and the driver is
    /// told (`ProcessLost`) so that it can end the job or let it go on.
    fn lose(&mut self, now: Instant, pid: &ProcessId) {
        self.procs.remove(pid);
        let Some(app) = self.app_of.get(pid).cloned() else {
            return;
        };
        // Planted: every application's change in flight, not only the lost process' own.
        let endangered: Vec<PsetName> = if self.bug(Bug::LossAbortsEveryChange) {
            self.in_flight.values().cloned().collect()
        } else {
            self.in_flight.get(&app).cloned().into_iter().collect()
        };
        if !self.bug(Bug::IgnoreLoss) {
            for delta in endangered {
                self.abort(now, &delta, AbortReason::MemberLost);
            }
        }
        let stuck: Vec<PsetName> = self
            .fences
            .iter()
            .filter(|(_, f)| f.members.contains(pid) && !f.arrived.contains_key(pid))
            .map(|(n, _)| n.clone())
            .collect();
        for pset in stuck {
            let f = self.fences.remove(&pset).expect("present");
            for route in f.arrived.into_values() {
                let err = RcError::ProcessLost(pid.clone());
                self.reply(&route, ClientReply::Fence(Err(err)));
            }
        }
        self.modex_lost(pid);
        // A spawn's children end when their work is done; that is no loss to the job,
        // and a failed one is its spawner's to learn through the handshake (SPAWN-19).
        // An MPI library's spawner has no such handshake with the kernel: its child is
        // the job's to judge, as any process (SPAWN-24).
        let out = match self.spawned_exit_is_loss(pid) {
            Some(false) if !self.bug(Bug::SpawnChildIsLoss) => {
                MasterOutput::SpawnedExited(pid.clone())
            }
            Some(_) | None => MasterOutput::ProcessLost(pid.clone()),
        };
        self.out.push_back(out);
    }

    /// A node is lost (`RC-17`): its slots are retired (`SLOT-4`) and each of its
    /// processes counts as exited — so a change that was adding one aborts, a change
    /// removing one has one fewer to wait for, and any other is reported lost.
    pub(crate) fn on_node_lost(&mut self, now: Instant, node: NodeId) {
        let gone = self.slots.retire_node(node.0);
        tracing::debug!(node = node.0, processes = gone.len(), "node lost");
        for pid in &gone {
            self.on_exit(now, pid);
        }
        self.out.push_back(MasterOutput::NodeReleased(node));
    }

    /// A node given back (`RC-20`): only an empty one; its slots are retired (`SLOT-5`)
    /// so nothing is placed there again. No process is affected.
    pub(crate) fn on_node_returned(&mut self, node: NodeId) -> Result<(), MasterRejection> {
        if node.0 as usize >= self.cfg.nodes.len() {
            return Err(MasterRejection::NoSuchNode(node));
        }
        let busy = !self.slots.processes_on(node.0).is_empty();
        if busy && !self.bug(Bug::ReturnBusyNode) {
            return Err(MasterRejection::NodeBusy(node));
        }
        let gone = self.slots.retire_node(node.0);
        tracing::debug!(node = node.0, planted = gone.len(), "node returned");
        Ok(())
    }

    fn note_exit(&mut self, delta: &PsetName, pid: &ProcessId) {
        if let Some(c) = self.changes.get_mut(delta) {
            c.exited.insert(pid.clone());
        }
        self.forget_if_done(delta);
    }

    /// A decided change is done once every process it had to get rid of is gone; an
    /// aborted one then stops being queryable. Its record stays (without the snapshot)
    /// so late accepts and confirms get the same decision (`RC-1`).
    fn forget_if_done(&mut self, delta: &PsetName) {
        let Some(c) = self.changes.get_mut(delta) else {
            return;
        };
        let gone: &[ProcessId] = match c.info.status {
            RcStatus::Finalized => &c.info.removed,
            RcStatus::Aborted => &c.info.added,
            _ => return,
        };
        if c.done || !gone.iter().all(|p| c.exited.contains(p)) {
            return;
        }
        c.done = true;
        // Dropped, not cleared: a clear would first copy a table other states share.
        c.snapshot = Default::default();
        c.procs_before = Default::default();
        if c.info.status == RcStatus::Aborted && !self.bug(Bug::ForgetAbortAtMasterOnly) {
            self.broadcast(ToDaemon::Change {
                delta: delta.clone(),
                info: None,
            });
        }
        self.done_order.push_back(delta.clone());
        let kept = if self.bug(Bug::EvictOnDone) {
            0
        } else {
            super::DONE_KEPT
        };
        let mut evicted = false;
        while self.done_order.len() > kept {
            if let Some(old) = self.done_order.pop_front() {
                self.evict(&old);
                evicted = true;
            }
        }
        // The forgotten deltas may have held the last reference to processes that left.
        if evicted {
            self.retire_processes();
        }
    }

    /// Forgets a done change (`RC-19`): its record, its protocol keys and its delta
    /// pset(s), whose names can never come back (`PSET-5`: delta names follow the epoch
    /// counter). Late accepts and confirms then get `NoSuchChange`.
    fn evict(&mut self, delta: &PsetName) {
        let Some(c) = self.changes.remove(delta) else {
            return;
        };
        self.data.remove(&accept_key(delta));
        self.data.remove(&confirm_key(delta));
        for name in core::iter::once(&c.info.delta).chain(&c.info.sub_delta) {
            if self.registry.forget_delta(&c.info.app, name) {
                self.broadcast(ToDaemon::PrunePset { name: name.clone() });
            }
        }
        tracing::debug!(%delta, "change forgotten");
    }

    /// Deadlines: undecided changes abort (`RC-10`), removed processes past their grace
    /// are killed (`RC-11`), blocking accepts answer "pending", lookups and fences fail.
    pub(crate) fn on_timeout(&mut self, now: Instant) {
        let due: Vec<PsetName> = self
            .changes
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(d, _)| d.clone())
            .collect();
        for delta in due {
            self.abort(now, &delta, AbortReason::NotDecidedInTime);
        }
        let graced: Vec<PsetName> = self
            .changes
            .iter()
            .filter(|(_, c)| c.grace_deadline.is_some_and(|d| d <= now))
            .map(|(d, _)| d.clone())
            .collect();
        for delta in graced {
            let change = self.changes.get_mut(&delta).expect("present");
            change.grace_deadline = None;
            let late: Vec<ProcessId> = change
                .info
                .removed
                .iter()
                .filter(|p| !change.exited.contains(*p))
                .cloned()
                .collect();
            tracing::debug!(%delta, n = late.len(), "grace period over, killing");
            self.kill(&late);
        }
        let deltas: Vec<PsetName> = self.changes.keys().cloned().collect();
        for delta in deltas {
            let change = self.changes.get_mut(&delta).expect("present");
            let (due, keep): (Vec<_>, Vec<_>) =
                core::mem::take(&mut change.waiters).into_iter().partition(
                    |(_, w)| matches!(w, Waiter::Accept { deadline, .. } if *deadline <= now),
                );
            change.waiters = keep;
            for (route, w) in due {
                if let Waiter::Accept { new_pset, .. } = w {
                    let reply = self.accept_reply(&delta, &new_pset);
                    self.reply(&route, ClientReply::Accept(reply));
                }
            }
        }
        self.expire_data(now);
        self.expire_modexes(now);
        self.expire_growth(now, false);
    }
}

/// Planted bug `FinalizeOnFirstConfirm`: "confirmed" read as "some new process
/// confirmed". (Planted-bug code lives in `planted_*` functions, which the mutation run
/// leaves out: it never runs in a tested build.)
fn planted_some_confirmed(change: &super::Change) -> bool {
    change
        .info
        .added
        .iter()
        .any(|p| change.confirmed.contains(p))
        || change.info.added.is_empty()
}

/// Planted `MisattributeExit`: an exit charged to the first change, done or not, that
/// names the process at all (added or removed), whatever its status.
fn planted_misattributed_owner(
    changes: &BTreeMap<PsetName, Change>,
    pid: &ProcessId,
) -> Option<(PsetName, RcStatus)> {
    changes
        .iter()
        .find(|(_, c)| c.info.includes(pid))
        .map(|(d, c)| (d.clone(), c.info.status))
}

/// Planted bug `FinalizeOnAccept`: an ADD or REPLACE decided by its accepts, as a SUB is.
fn planted_finalizes_on_accept(kind: RcType) -> bool {
    kind != RcType::Sub
}

/// Planted bug `ConfirmFromAnyMember`: the accept's check (the caller's application)
/// used for a confirm.
fn planted_member_of_app(app_of: &BTreeMap<ProcessId, String>, pid: &ProcessId, app: &str) -> bool {
    app_of.get(pid).map(String::as_str) == Some(app)
}
