//! The master's growth beyond its nodes (`spec/runtime.md` GROW-1..3): core asks for
//! slots it lacks (`NeedSlots`, RC-21), a thread asks Slurm for a second allocation, and
//! its nodes are added to core (`NodeAdded`) with their daemons started as job steps of
//! it. Core decides whether the waiting request starts or is refused.

use std::sync::mpsc::Sender;
use std::time::Duration as StdDuration;

use dynres_core::rc::MasterInput;
use dynres_core::slots::NodeSpec;

use super::{Engine, Event};
use crate::slurm::{self, Grant};

/// How the master obtains more nodes: a second Slurm allocation.
pub struct Grow {
    /// How long Slurm may take to grant it (core's `grow_wait`).
    pub wait: StdDuration,
    /// Slots a node is expected to have (the allocation's largest), to size the ask.
    pub per_node: u32,
    /// Where the allocating thread reports.
    pub events: Sender<Event>,
}

impl Engine {
    /// Lets the master grow beyond its nodes (GROW-1).
    pub fn with_grow(mut self, grow: Grow) -> Engine {
        self.grow = Some(grow);
        self
    }

    /// Core needs `slots` more slots (RC-21): ask Slurm on a thread of its own, so the
    /// engine never waits for it. Without a resource manager core refuses the request
    /// at its deadline.
    pub(super) fn need_slots(&mut self, slots: u32) {
        let Some(g) = &self.grow else {
            tracing::warn!(slots, "no resource manager to ask for more slots");
            self.master_input(MasterInput::SlotsDenied);
            return;
        };
        let nodes = slurm::nodes_for(slots, g.per_node);
        let (wait, events) = (g.wait, g.events.clone());
        let name = format!("dynres-{}-grow", self.job_id);
        tracing::info!(slots, nodes, "asking Slurm for more nodes");
        let spawned = std::thread::Builder::new()
            .name("dynres-grow".into())
            .spawn(move || {
                let _ = events.send(Event::Granted(slurm::allocate(nodes, wait, &name)));
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "no thread to ask Slurm for nodes");
            self.master_input(MasterInput::SlotsDenied);
        }
    }

    /// Slurm answered (GROW-1): the granted nodes join the job, their daemons start, and
    /// core hears of each; nodes the waiting request did not need go back at once
    /// (GROW-2). A refusal is reported to core, which refuses the request (RC-21).
    pub(super) fn on_granted(&mut self, result: Result<Grant, String>) {
        let grant = match result {
            Ok(g) => g,
            Err(why) => {
                tracing::error!("{why}");
                self.master_input(MasterInput::SlotsDenied);
                return;
            }
        };
        let Some(nodes) = &mut self.nodes else {
            slurm::release(&grant.job);
            return;
        };
        tracing::info!(job = %grant.job, hosts = grant.hosts.len(), "Slurm granted nodes");
        let added = nodes.add_grant(&grant);
        for node in &added {
            if let Err(why) = nodes.start(*node) {
                tracing::error!("{why}");
                self.lost_nodes.push((*node, why));
            }
        }
        for (node, host) in added.iter().zip(&grant.hosts) {
            self.master_input(MasterInput::NodeAdded {
                node: NodeSpec {
                    name: host.name.clone(),
                    slots: host.slots,
                },
            });
            let used = self
                .master
                .as_ref()
                .is_some_and(|m| m.slots().is_allocated(*node));
            if !used {
                self.to_return.push(*node);
            }
        }
        self.drain();
    }
}
