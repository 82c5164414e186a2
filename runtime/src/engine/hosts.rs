//! The engine's side of a job over several hosts (`spec/runtime.md`): on the master,
//! relaying core's frames to other nodes' daemons and back, judging their processes'
//! ends (LINK-4), reporting lost nodes to core (NODE-1) and giving emptied nodes back
//! (RC-20); on a node daemon, the link to the master (LINK-1..5, RT-3).

use dynres_core::ProcessId;
use dynres_core::Rank;
use dynres_core::rc::ends::KillCause;
use dynres_core::rc::wire::link::{LinkMsg, decode_link, encode_link, is_link_type};
use dynres_core::rc::wire::{decode_to_daemon, decode_to_master, encode_to_daemon};
use dynres_core::rc::{DaemonInput, MasterInput, NodeId, ToDaemon, ToMaster};
use dynres_core::wire::decode_frame;

use dynres_core::rc::giveback::{GiveBackInput, GiveBackOutput, HOLD_BOUND};

use super::{Engine, RemoteProc};
use crate::daemon::Upstream;
use crate::nodes::Nodes;
use crate::signals;

impl Engine {
    /// Adds the other hosts' daemons (a master over several hosts).
    /// RT-2: every other host's daemon is started with the job (core replicates psets
    /// to every node from the start); a host whose agent cannot start is lost at once.
    pub fn with_nodes(mut self, mut nodes: Nodes) -> Engine {
        for node in nodes.others() {
            if let Err(why) = nodes.start(node) {
                tracing::error!("{why}");
                self.lost_nodes.push((node, why));
            }
        }
        self.nodes = Some(nodes);
        self
    }

    /// Adds the link to the master (a node daemon).
    pub fn with_upstream(mut self, up: Upstream) -> Engine {
        self.upstream = Some(up);
        self
    }

    /// Heartbeats and failure detection on master ↔ daemon links (HB-1..3), and the
    /// bound on emptied nodes held for others (GROW-4).
    pub(super) fn tick_links(&mut self) {
        if !self.giveback.held().is_empty() {
            // Held nodes go at the latest after HOLD_BOUND (GROW-4).
            self.drain();
        }
        if let Some(nodes) = &mut self.nodes {
            let dead = nodes.tick();
            if !dead.is_empty() {
                self.lost_nodes.extend(dead);
                self.drain();
            }
        }
        if let Some(up) = &mut self.upstream {
            if let Err(why) = up.tick() {
                self.master_gone(why);
            }
        }
    }

    /// (Node daemon) the master is gone or silent (RT-3): end this node's processes
    /// and exit once they are reaped.
    pub(super) fn master_gone(&mut self, why: String) {
        if self.upstream_done.is_none() {
            tracing::error!("lost the master: {why}; ending this node's processes");
            self.upstream_done = Some(Err(format!("lost the master: {why}")));
            // NODE-4: ended on this daemon's own account, a loss for the job.
            self.kill_all(self.end_cause());
        }
    }

    /// (Master) a frame from `node`'s daemon (LINK-1, LINK-3, LINK-4).
    pub(super) fn on_node_frame(&mut self, node: u32, frame: &[u8]) {
        if let Some(nodes) = &mut self.nodes {
            nodes.heard(node);
        }
        let ty = frame_type(frame);
        if is_link_type(ty) {
            match decode_link(frame) {
                Ok(LinkMsg::Heartbeat) => {}
                Ok(LinkMsg::Started { rank, os_pid }) => {
                    if let Some(p) = self.remote_procs.get_mut(&rank) {
                        p.os_pid = Some(os_pid);
                    }
                    crate::events::start(rank, node);
                }
                Ok(LinkMsg::Ended {
                    rank,
                    os_pid,
                    code,
                    cause,
                }) => {
                    if let Some(p) = self.remote_procs.get_mut(&rank) {
                        p.os_pid = p.os_pid.or(Some(os_pid).filter(|p| *p != 0));
                        p.ended = Some((code, cause));
                    }
                    crate::events::end(rank, node, i64::from(code));
                }
                // PMIS-7: an MPI_Abort on another node ends the job as one here does,
                // if the rank runs where the daemon says.
                Ok(LinkMsg::Aborted {
                    rank,
                    code,
                    message,
                }) if self.remote_procs.get(&rank).is_some_and(|p| p.node == node) => {
                    self.pmi_abort(rank, code, &message);
                }
                Ok(m) => self.node_violation(node, format!("unexpected {m:?} from a daemon")),
                Err(e) => self.node_violation(node, format!("malformed frame: {e}")),
            }
            return;
        }
        match decode_to_master(frame) {
            Ok(msg) => {
                let exited = match &msg {
                    ToMaster::Exited { pid } => Some(pid.rank),
                    ToMaster::Forward { .. }
                    | ToMaster::Modex { .. }
                    | ToMaster::Started { .. } => None,
                };
                self.master_input(MasterInput::FromDaemon {
                    node: NodeId(node),
                    msg,
                });
                if let Some(rank) = exited {
                    self.remote_procs.remove(&rank);
                }
            }
            Err(e) => self.node_violation(node, format!("malformed frame: {e}")),
        }
    }

    /// (Master) relays core's frame to another node's daemon (LINK-3); processes it is
    /// told to launch count as the job's until their node reports them gone.
    pub(super) fn send_to_node(&mut self, node: u32, msg: &ToDaemon) {
        let launched: Vec<&ProcessId> = match msg {
            ToDaemon::Launch { procs } => procs.iter().collect(),
            ToDaemon::Spawn { launches, .. } => launches.iter().flat_map(|l| &l.procs).collect(),
            _ => Vec::new(),
        };
        for p in launched {
            self.remote_procs.insert(
                p.rank,
                RemoteProc {
                    node,
                    os_pid: None,
                    ended: None,
                },
            );
        }
        let sent = match &mut self.nodes {
            Some(nodes) => nodes.send(node, &encode_to_daemon(msg)),
            None => Err(format!("node {node} has no host")),
        };
        if let Err(why) = sent {
            self.lost_nodes.push((node, why));
        }
    }

    /// (Node daemon) a frame for the master; a link that fails ends this node (RT-3).
    pub(super) fn upstream_send(&mut self, frame: &[u8]) {
        let r = match &mut self.upstream {
            Some(up) => up.send(frame),
            None => Ok(()),
        };
        if let Err(why) = r {
            self.master_gone(why);
        }
    }

    /// (Node daemon) LINK-4: how a process ended, before core's `Exited` for it.
    pub(super) fn report_end(&mut self, rank: Rank, os_pid: u32, code: u32, cause: KillCause) {
        if self.upstream.is_some() {
            self.upstream_send(&encode_link(&LinkMsg::Ended {
                rank,
                os_pid,
                code,
                cause,
            }));
        }
    }

    /// LINK-1: a frame that does not decode ends the link; the node is lost.
    pub(super) fn node_violation(&mut self, node: u32, why: String) {
        tracing::warn!(node, "{why}; dropping the node's link");
        self.lost_nodes.push((node, why));
        self.drain();
    }

    /// (Node daemon) a frame from the master (LINK-1..3, LINK-5).
    pub(super) fn on_master_frame(&mut self, frame: &[u8]) {
        if let Some(up) = &mut self.upstream {
            up.heard();
        }
        let ty = frame_type(frame);
        if is_link_type(ty) {
            match decode_link(frame) {
                Ok(LinkMsg::Heartbeat) => {}
                Ok(LinkMsg::Shutdown) => {
                    tracing::debug!("the master ended the job");
                    if self.upstream_done.is_none() {
                        self.upstream_done = Some(Ok(()));
                    }
                    self.kill_all(self.end_cause());
                }
                Ok(LinkMsg::Signal { signal }) => match i32::try_from(signal) {
                    Ok(s) if s == libc::SIGUSR1 || s == libc::SIGUSR2 => self.forward_signal(s),
                    _ => self.master_gone(format!("the master asked for signal {signal}")),
                },
                Ok(m) => self.master_gone(format!("unexpected {m:?} from the master")),
                Err(e) => self.master_gone(format!("malformed frame from the master: {e}")),
            }
            return;
        }
        match decode_to_daemon(frame) {
            Ok(msg) => self.daemon_input(DaemonInput::FromMaster(msg)),
            Err(e) => self.master_gone(format!("malformed frame from the master: {e}")),
        }
    }

    /// (Master) RC-20: offers emptied nodes back to core; those it accepts are given
    /// back to the resource manager. A node a change placed a process on meanwhile is
    /// refused and kept. GROW-4: emptied nodes are held while another node that would
    /// be given back is still being emptied (core's `is_emptying`), so the nodes one
    /// change empties go back in one resource manager update — but never longer than
    /// [`HOLD_BOUND`].
    pub(super) fn return_nodes(&mut self) {
        let now = self.now();
        for node in self.to_return.drain(..) {
            self.giveback.handle(now, GiveBackInput::Released { node });
        }
        if self.giveback.held().is_empty() {
            return;
        }
        let (Some(m), Some(nodes)) = (&mut self.master, &mut self.nodes) else {
            self.giveback = Default::default();
            return;
        };
        let emptying: Vec<u32> = nodes
            .others()
            .into_iter()
            .filter(|n| nodes.gives_back(*n) && nodes.is_live(*n) && m.slots().is_emptying(*n))
            .collect();
        let waiting = self.giveback.poll_timeout().is_none();
        self.giveback
            .handle(now, GiveBackInput::Emptying(!emptying.is_empty()));
        let Some(GiveBackOutput::Offer {
            nodes: batch,
            overdue,
        }) = self.giveback.poll_output()
        else {
            if waiting {
                let held = self.giveback.held();
                tracing::debug!(?emptying, ?held, "emptied nodes wait for others");
            }
            return;
        };
        if overdue {
            tracing::warn!(
                ?emptying,
                "nodes still emptying after {} s; giving back the others without them",
                HOLD_BOUND.as_nanos() / 1_000_000_000
            );
        }
        let mut accepted = Vec::new();
        for node in batch {
            match m.handle(now, MasterInput::NodeReturned { node: NodeId(node) }) {
                Ok(()) => accepted.push(node),
                Err(e) => tracing::debug!(node, error = %e, "node kept"),
            }
        }
        if !accepted.is_empty() {
            nodes.return_to_slurm(&accepted);
        }
    }

    /// (Master) core learns of the nodes found dead (NODE-1, RC-17); their processes
    /// are judged lost (NODE-2) while still listed, then forgotten.
    pub(super) fn report_lost_nodes(&mut self) {
        while let Some((node, why)) = self.lost_nodes.pop() {
            let Some(nodes) = &mut self.nodes else {
                continue;
            };
            if !self.reported_lost.insert(node) {
                continue;
            }
            let host = nodes.host(node).to_string();
            nodes.drop_node(node);
            let had = self.remote_procs.values().any(|p| p.node == node);
            if self.ending.is_some() || signals::interrupted() {
                tracing::info!(node, host, "daemon gone: {why}");
            } else if had {
                tracing::error!(node, host, "node lost: {why}");
            } else {
                tracing::warn!(node, host, "node lost: {why}; its slots are retired");
            }
            self.node_lost_why = Some(format!("node {node} ({host}) lost: {why}"));
            crate::events::node_gone(node);
            let now = self.now();
            if let Some(m) = &mut self.master {
                if let Err(e) = m.handle(now, MasterInput::NodeLost { node: NodeId(node) }) {
                    tracing::debug!(error = %e, "master refused NodeLost");
                }
            }
            self.drain_links();
            self.node_lost_why = None;
            self.remote_procs.retain(|_, p| p.node != node);
        }
    }
}

/// The message type of a whole frame, by core's header parser (the link's reader split
/// it, so the header is there; 0, no type, otherwise).
fn frame_type(frame: &[u8]) -> u16 {
    decode_frame(frame).map_or(0, |(h, _)| h.msg_type)
}
