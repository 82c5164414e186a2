//! Growth beyond the job's nodes (`RC-21`, `SLOT-6`): a change request that needs more
//! slots than the job has may wait for the driver to add nodes (a resource manager's
//! second allocation), instead of being refused at once (`RC-2`).
//!
//! The master decides only what the protocol needs: how many slots are missing, how
//! long the request waits, what a new node's daemon must hold before it is used. How
//! nodes are obtained is the driver's business.

use alloc::vec::Vec;

use super::{Growth, MAX_SLOTS, Master, MasterOutput, Requester};
use crate::bugs::Bug;
use crate::process::ProcessId;
use crate::pset::PsetName;
use crate::rc::error::{MasterRejection, RcError};
use crate::rc::msg::{ClientReply, ToDaemon};
use crate::rc::types::{ChangeRequest, NodeId};
use crate::slots::{NodeSpec, SlotError};
use crate::time::Instant;

impl Master {
    /// A request failed for want of slots: with `grow_wait` set and no other request
    /// waiting, it waits for the driver to add nodes and the driver is asked for the
    /// missing slots (`RC-21`). Returns the request if it cannot wait.
    pub(crate) fn wait_for_slots(
        &mut self,
        now: Instant,
        from: Requester,
        req: ChangeRequest,
        error: &RcError,
    ) -> Option<(Requester, ChangeRequest)> {
        let (Some(wait), None) = (self.cfg.grow_wait, &self.growth) else {
            return Some((from, req));
        };
        let RcError::Slots(SlotError::Exhausted { wanted, free }) = error else {
            return Some((from, req));
        };
        let slots = wanted.saturating_sub(*free).min(u32::MAX as usize) as u32;
        if let Requester::Client(r) = &from {
            // As for a queued request: the outcome comes with the change (RC-15).
            self.reply(r, ClientReply::ChangeRequested(Ok(None)));
        }
        tracing::debug!(slots, app = %req.app, "waiting for the driver to add slots");
        self.growth = Some(Growth {
            from,
            req,
            slots,
            deadline: now + wait,
            refused: false,
        });
        self.out.push_back(MasterOutput::NeedSlots { slots });
        None
    }

    /// Whether `app` has a request waiting for slots (it counts as in flight, RC-15).
    pub(crate) fn growing(&self, app: &str) -> bool {
        self.growth.as_ref().is_some_and(|g| g.req.app == app)
    }

    /// `NodeAdded` (`RC-21`, `SLOT-6`): the node's slots come last; its daemon gets the
    /// replica — every live pset, the job data, every change still in progress — before
    /// any change can place a process there (`RC-3`, `RC-14`); a waiting request starts
    /// once its slots are there.
    pub(crate) fn on_node_added(
        &mut self,
        now: Instant,
        node: NodeSpec,
    ) -> Result<(), MasterRejection> {
        let total: u64 = self.cfg.nodes.iter().map(|n| u64::from(n.slots)).sum();
        if total + u64::from(node.slots) > MAX_SLOTS {
            return Err(MasterRejection::TooManySlots);
        }
        let id = NodeId(self.slots.add_node(node.clone()));
        self.cfg.nodes.push(node);
        tracing::debug!(node = id.0, "node added");
        // RC-22: the replica first, so nothing below can use the node before its daemon
        // holds what every other daemon holds.
        let replica_first =
            !self.bug(Bug::NoReplicaForAddedNode) && !self.bug(Bug::GrowStartsBeforeReplica);
        if replica_first {
            self.send_replica(id);
        }
        let ready = self
            .growth
            .as_ref()
            .is_some_and(|g| self.slots.free_count() >= g.req.change.adds() as usize);
        if ready {
            if let Some(g) = self.growth.take() {
                let app = g.req.app.clone();
                self.start_or_refuse(now, g.from, g.req);
                self.dequeue(now, &app);
            }
        }
        if self.bug(Bug::GrowStartsBeforeReplica) {
            self.send_replica(id);
        }
        Ok(())
    }

    /// What every other daemon already holds, in the order a job's start sends it.
    fn send_replica(&mut self, to: NodeId) {
        let names: Vec<PsetName> = self.registry.live_psets().map(|(n, _)| n.clone()).collect();
        for name in names {
            if let Some(define) = self.define_pset(&name) {
                self.send(to, define);
            }
        }
        let added: Vec<ProcessId> = self.procs.keys().cloned().collect();
        self.send(to, ToDaemon::job_data(&added, &[]));
        // The table the other daemons hold (RC-14): undecided changes, and aborted ones
        // until their added processes are gone. A finalized change was withdrawn from
        // them when it was finalized, and nothing withdraws it again when it is done,
        // so it must not be handed to a new daemon even while its removed processes
        // are still exiting.
        let changes: Vec<(PsetName, crate::rc::types::ChangeInfo)> = self
            .changes
            .iter()
            .filter(|(_, c)| {
                !c.done
                    && (c.info.status != crate::rc::RcStatus::Finalized
                        || self.bug(Bug::ReplicaHandsOutFinalized))
            })
            .map(|(d, c)| (d.clone(), c.info.clone()))
            .collect();
        for (delta, info) in changes {
            self.send(
                to,
                ToDaemon::Change {
                    delta,
                    info: Some(info),
                },
            );
        }
    }

    /// A request whose slots did not come by its deadline, or that the driver could not
    /// obtain (`denied`), is refused with `NotGranted` (`RC-21`); its application's
    /// queue moves on.
    pub(crate) fn expire_growth(&mut self, now: Instant, denied: bool) {
        if self
            .growth
            .as_ref()
            .is_some_and(|g| !g.refused && (denied || g.deadline <= now))
        {
            let g = if self.bug(Bug::KeepRefusedGrowth) {
                // Planted: refused, yet left waiting for a node.
                self.growth.as_mut().map(|g| {
                    g.refused = true;
                    g.clone()
                })
            } else {
                self.growth.take()
            };
            if let Some(g) = g {
                let app = g.req.app.clone();
                let error = RcError::NotGranted { slots: g.slots };
                self.refuse(g.from, g.req, error);
                self.dequeue(now, &app);
            }
        }
    }
}
