//! Slot allocation in stack order (thesis §7.2, Fig. 7.1; `spec/psets.md` §6).
//!
//! The slots of all nodes form one total order (node 0's slots first, then node 1's…).
//! An ADD takes the lowest free slots, so it fills the job's last node before taking a
//! new one; a SUB picks its victims from the highest occupied slots. A slot a leaving
//! process held is freed only once that process has exited (`SLOT-3`), and a node with
//! no occupied or leaving slot left is released from the job.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::hash::{Hash, Hasher};

use crate::process::ProcessId;

/// A node and how many processes it may run.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeSpec {
    /// Host name.
    pub name: String,
    /// Number of slots.
    pub slots: u32,
}

/// The state of one slot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlotState {
    /// Nobody runs here.
    Free,
    /// A process of the job runs here.
    Occupied(ProcessId),
    /// A process that was told to terminate still runs here.
    Leaving(ProcessId),
    /// The node was lost (`SLOT-4`) or given back (`SLOT-5`); the slot is never used
    /// again.
    Retired,
}

/// Where one new process goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Placement {
    /// The process.
    pub pid: ProcessId,
    /// Its slot in the total order.
    pub slot: u32,
    /// Index of its node in the node list.
    pub node: u32,
}

/// Why a slot request failed. Nothing changes when it does.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
pub enum SlotError {
    /// Not enough free slots.
    #[error("{wanted} slots wanted, {free} free")]
    Exhausted {
        /// Slots asked for.
        wanted: usize,
        /// Slots free.
        free: usize,
    },
    /// Not enough processes to remove.
    #[error("{wanted} victims wanted, {running} processes running")]
    TooFewProcesses {
        /// Victims asked for.
        wanted: usize,
        /// Processes running (not already leaving).
        running: usize,
    },
    /// The process holds no slot (or not in the state the request needs).
    #[error("process {0} holds no slot in the required state")]
    NotPlaced(ProcessId),
    /// The process already holds a slot.
    #[error("process {0} already holds a slot")]
    AlreadyPlaced(ProcessId),
}

/// The job's slots, in their total order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotMap {
    nodes: Vec<NodeSpec>,
    /// First slot index of each node, plus the total at the end.
    starts: Vec<u32>,
    slots: Vec<SlotState>,
    /// Which slot each placed process holds, so finding a process' slot costs a lookup,
    /// not a scan of every slot of the job (issue 29: the scan made placing a job of n
    /// processes, and the master's per-process checks, O(n²)).
    index: SlotIndex,
    /// Planted bugs (always empty in shipped builds).
    pub(crate) bugs: crate::bugs::Bugs,
}

/// The slot of every process in an occupied or leaving slot: a function of the slots,
/// so it takes no part in comparing or hashing a map (states, fingerprints and the
/// models' state spaces stay those of the slots alone).
#[derive(Clone, Debug, Default)]
struct SlotIndex(BTreeMap<ProcessId, u32>);

impl PartialEq for SlotIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SlotIndex {}

impl PartialOrd for SlotIndex {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SlotIndex {
    fn cmp(&self, _: &Self) -> Ordering {
        Ordering::Equal
    }
}

impl Hash for SlotIndex {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

impl SlotMap {
    /// All slots of `nodes`, free.
    pub fn new(nodes: Vec<NodeSpec>) -> Self {
        let mut starts = Vec::with_capacity(nodes.len() + 1);
        let mut total = 0u32;
        for n in &nodes {
            starts.push(total);
            total = total.saturating_add(n.slots);
        }
        starts.push(total);
        SlotMap {
            nodes,
            starts,
            slots: alloc::vec![SlotState::Free; total as usize],
            index: SlotIndex::default(),
            bugs: crate::bugs::Bugs::NONE,
        }
    }

    /// The nodes.
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.nodes
    }

    /// The state of every slot, in order.
    pub fn slots(&self) -> &[SlotState] {
        &self.slots
    }

    /// Node index of a slot (`None` past the last slot).
    pub fn node_of(&self, slot: u32) -> Option<u32> {
        if slot as usize >= self.slots.len() {
            return None;
        }
        // `starts[0] == 0 <= slot`, so the partition point is at least 1.
        Some((self.starts.partition_point(|&s| s <= slot) - 1) as u32)
    }

    /// Whether any slot of `node` is occupied or leaving (the node belongs to the job).
    pub fn is_allocated(&self, node: u32) -> bool {
        self.node_slots(node)
            .iter()
            .any(|s| matches!(s, SlotState::Occupied(_) | SlotState::Leaving(_)))
    }

    /// Whether `node` is being emptied: it holds processes and every one of them is
    /// leaving (removed by a decided change, or killed as the added process of an
    /// aborted one). It is released (`SLOT-3`) when the last of them exits; a driver
    /// that gives nodes back (`RC-20`) may wait for it so that nodes one change empties
    /// go back together.
    pub fn is_emptying(&self, node: u32) -> bool {
        let slots = self.node_slots(node);
        slots.iter().any(|s| matches!(s, SlotState::Leaving(_)))
            && !slots.iter().any(|s| matches!(s, SlotState::Occupied(_)))
    }

    fn node_slots(&self, node: u32) -> &[SlotState] {
        let n = node as usize;
        match (self.starts.get(n), self.starts.get(n + 1)) {
            (Some(&a), Some(&b)) => &self.slots[a as usize..b as usize],
            _ => &[],
        }
    }

    /// The processes on `node`, in slot order.
    pub fn processes_on(&self, node: u32) -> Vec<ProcessId> {
        self.node_slots(node)
            .iter()
            .filter_map(|s| match s {
                SlotState::Occupied(p) | SlotState::Leaving(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// Retires every slot of a lost (`SLOT-4`) or returned (`SLOT-5`) node: nothing is
    /// placed there again. Returns the processes that were on it.
    pub fn retire_node(&mut self, node: u32) -> Vec<ProcessId> {
        let gone = self.processes_on(node);
        let n = node as usize;
        if let (Some(&a), Some(&b)) = (self.starts.get(n), self.starts.get(n + 1)) {
            for s in &mut self.slots[a as usize..b as usize] {
                *s = SlotState::Retired;
            }
            for p in &gone {
                self.index.0.remove(p);
            }
        }
        gone
    }

    /// Adds a node after every existing one (`SLOT-6`): its slots come last in the
    /// total order, free. Returns its index; indices are never reused.
    pub fn add_node(&mut self, node: NodeSpec) -> u32 {
        let index = self.nodes.len() as u32;
        let total = self.starts.last().copied().unwrap_or(0);
        let end = total.saturating_add(node.slots);
        self.slots
            .extend(core::iter::repeat_n(SlotState::Free, node.slots as usize));
        self.starts.push(end);
        if !self.bugs.has(crate::bugs::Bug::AddNodeSlotsOnly) {
            self.nodes.push(node);
        }
        index
    }

    /// Nodes that currently belong to the job.
    pub fn allocated_nodes(&self) -> Vec<u32> {
        (0..self.nodes.len() as u32)
            .filter(|&n| self.is_allocated(n))
            .collect()
    }

    /// Number of free slots.
    pub fn free_count(&self) -> usize {
        self.slots.iter().filter(|s| **s == SlotState::Free).count()
    }

    /// Whether `pid` runs and is not leaving.
    pub fn is_running(&self, pid: &ProcessId) -> bool {
        self.slot_of(pid)
            .is_some_and(|i| matches!(&self.slots[i as usize], SlotState::Occupied(p) if p == pid))
    }

    /// The slot `pid` holds, if any.
    pub fn slot_of(&self, pid: &ProcessId) -> Option<u32> {
        self.index.0.get(pid).copied()
    }

    /// Places new processes on the lowest free slots (`SLOT-1`). Returns the placements
    /// and the nodes newly allocated to the job, both in slot order.
    pub fn place(&mut self, pids: &[ProcessId]) -> Result<(Vec<Placement>, Vec<u32>), SlotError> {
        let free = self.free_count();
        if pids.len() > free {
            return Err(SlotError::Exhausted {
                wanted: pids.len(),
                free,
            });
        }
        if let Some(p) = pids.iter().find(|p| self.slot_of(p).is_some()) {
            return Err(SlotError::AlreadyPlaced(p.clone()));
        }
        let mut placed = Vec::with_capacity(pids.len());
        let mut new_nodes = Vec::new();
        let mut free_slots = (0..self.slots.len()).filter(|&i| self.slots[i] == SlotState::Free);
        let chosen: Vec<usize> = free_slots.by_ref().take(pids.len()).collect();
        // The chosen slots ascend, so each node's come in one run: whether it is new to
        // the job is asked once per node, before this placement puts anyone there, not
        // once per process (a scan of the node's slots each time).
        let mut last_node = None;
        for (pid, slot) in pids.iter().zip(chosen) {
            let node = self.node_of(slot as u32).unwrap_or_default();
            if last_node != Some(node) {
                last_node = Some(node);
                if !self.is_allocated(node) && !new_nodes.contains(&node) {
                    new_nodes.push(node);
                }
            }
            self.slots[slot] = SlotState::Occupied(pid.clone());
            // The lowest slot first, as a scan of the slots would find it.
            self.index.0.entry(pid.clone()).or_insert(slot as u32);
            placed.push(Placement {
                pid: pid.clone(),
                slot: slot as u32,
                node,
            });
        }
        Ok((placed, new_nodes))
    }

    /// The `k` processes on the highest occupied slots, highest first (`SLOT-2`).
    /// Chooses only; nothing changes until [`SlotMap::mark_leaving`].
    pub fn victims(&self, k: usize) -> Result<Vec<ProcessId>, SlotError> {
        self.victims_where(k, |_| true)
    }

    /// Like [`SlotMap::victims`], among the processes `eligible` accepts (e.g. one
    /// application's).
    pub fn victims_where(
        &self,
        k: usize,
        eligible: impl Fn(&ProcessId) -> bool,
    ) -> Result<Vec<ProcessId>, SlotError> {
        let running: Vec<&ProcessId> = self
            .slots
            .iter()
            .rev()
            .filter_map(|s| match s {
                SlotState::Occupied(p) if eligible(p) => Some(p),
                _ => None,
            })
            .collect();
        if k > running.len() {
            return Err(SlotError::TooFewProcesses {
                wanted: k,
                running: running.len(),
            });
        }
        Ok(running.into_iter().take(k).cloned().collect())
    }

    /// Marks processes as leaving: they keep their slots until they exit.
    pub fn mark_leaving(&mut self, pids: &[ProcessId]) -> Result<(), SlotError> {
        let mut idx = Vec::with_capacity(pids.len());
        for p in pids {
            match self.slot_of(p) {
                Some(i) if self.slots[i as usize] == SlotState::Occupied(p.clone()) => idx.push(i),
                _ => return Err(SlotError::NotPlaced(p.clone())),
            }
        }
        for (i, p) in idx.into_iter().zip(pids) {
            self.slots[i as usize] = SlotState::Leaving(p.clone());
        }
        Ok(())
    }

    /// Frees the slot of a process that has exited (`SLOT-3`). Returns the node if it
    /// no longer holds any process and is thereby released from the job.
    pub fn free(&mut self, pid: &ProcessId) -> Result<Option<u32>, SlotError> {
        let slot = self
            .slot_of(pid)
            .ok_or_else(|| SlotError::NotPlaced(pid.clone()))?;
        self.slots[slot as usize] = SlotState::Free;
        self.index.0.remove(pid);
        let node = self.node_of(slot).unwrap_or_default();
        Ok((!self.is_allocated(node)).then_some(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Namespace;
    use alloc::format;
    use alloc::vec;

    fn pids(ranks: core::ops::Range<u32>) -> Vec<ProcessId> {
        ranks
            .map(|r| ProcessId::new(Namespace::new("job"), r))
            .collect()
    }

    fn four_by_four() -> SlotMap {
        SlotMap::new(
            (1..=4)
                .map(|i| NodeSpec {
                    name: format!("node{i}"),
                    slots: 4,
                })
                .collect(),
        )
    }

    /// The thesis' Fig. 7.1, epoch by epoch.
    #[test]
    fn figure_7_1() {
        let mut m = four_by_four();
        // Epoch 1: six processes on slots 0–5 (node 1 full, node 2 half).
        let (placed, new_nodes) = m.place(&pids(0..6)).unwrap();
        assert_eq!(
            placed.iter().map(|p| p.slot).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5]
        );
        assert_eq!(new_nodes, [0, 1]);
        // Epoch 2: eight more on slots 6–13; nodes 3 and 4 are allocated.
        let (placed, new_nodes) = m.place(&pids(6..14)).unwrap();
        assert_eq!(placed.first().map(|p| p.slot), Some(6));
        assert_eq!(placed.last().map(|p| (p.slot, p.node)), Some((13, 3)));
        assert_eq!(new_nodes, [2, 3]);
        // Epoch 3: remove four, the highest slots 13..=10; node 4 is released once the
        // process on its last slot has exited.
        let victims = m.victims(4).unwrap();
        assert_eq!(victims, pids(10..14).into_iter().rev().collect::<Vec<_>>());
        m.mark_leaving(&victims).unwrap();
        assert_eq!(
            m.allocated_nodes(),
            [0, 1, 2, 3],
            "leaving slots are still held"
        );
        let released: Vec<u32> = victims.iter().filter_map(|p| m.free(p).unwrap()).collect();
        assert_eq!(released, [3]);
        assert_eq!(m.allocated_nodes(), [0, 1, 2]);
        assert_eq!(m.free_count(), 16 - 10);
        assert_eq!((m.node_of(15), m.node_of(16)), (Some(3), None));
        assert!(!m.is_allocated(99));
    }

    #[test]
    fn a_node_is_emptying_while_all_its_processes_leave() {
        let mut m = four_by_four();
        // Node 0 full (ranks 0-3), node 1 full (4-7), node 2 with rank 8.
        m.place(&pids(0..9)).unwrap();
        assert!((0..4).all(|n| !m.is_emptying(n)), "nothing leaves yet");
        // Remove the highest three: node 2's only process and two of node 1's.
        let victims = m.victims(3).unwrap();
        assert_eq!(victims, pids(6..9).into_iter().rev().collect::<Vec<_>>());
        m.mark_leaving(&victims).unwrap();
        assert!(m.is_emptying(2), "its only process leaves");
        assert!(!m.is_emptying(1), "two processes stay on it");
        assert!(
            !m.is_emptying(0) && !m.is_emptying(3),
            "untouched, and empty"
        );
        // Node 1's other two leave as well.
        m.mark_leaving(&pids(4..6)).unwrap();
        assert!(m.is_emptying(1));
        // A node stops emptying once its last process exited (it is released).
        assert_eq!(m.free(&victims[0]), Ok(Some(2)));
        assert!(!m.is_emptying(2));
        assert_eq!(m.free(&victims[1]), Ok(None));
        assert!(m.is_emptying(1), "three of its processes still leave");
        for p in victims[2..].iter().chain(&pids(4..6)) {
            m.free(p).unwrap();
        }
        assert!(!m.is_emptying(1), "released");
        assert!(!m.is_emptying(99));
    }

    #[test]
    fn add_refills_the_lowest_free_slot_first() {
        let mut m = four_by_four();
        m.place(&pids(0..6)).unwrap();
        let victim = pids(2..3);
        m.mark_leaving(&victim).unwrap();
        m.free(&victim[0]).unwrap();
        let (placed, new_nodes) = m.place(&pids(100..102)).unwrap();
        assert_eq!(placed.iter().map(|p| p.slot).collect::<Vec<_>>(), [2, 6]);
        assert!(new_nodes.is_empty());
    }

    #[test]
    fn victims_skip_leaving_processes_and_errors_change_nothing() {
        let mut m = four_by_four();
        m.place(&pids(0..3)).unwrap();
        m.mark_leaving(&pids(2..3)).unwrap();
        assert_eq!(m.victims(1).unwrap(), pids(1..2));
        // Leaving processes still hold a slot but no longer count as running.
        assert!(m.is_running(&pids(0..1)[0]));
        assert!(!m.is_running(&pids(2..3)[0]));
        assert!(!m.is_running(&pids(40..41)[0]));
        assert_eq!(m.slot_of(&pids(2..3)[0]), Some(2));
        assert_eq!(m.nodes().len(), 4);
        assert_eq!(m.nodes()[3].name, "node4");
        let before = m.clone();
        assert_eq!(
            m.victims(3),
            Err(SlotError::TooFewProcesses {
                wanted: 3,
                running: 2
            })
        );
        assert_eq!(
            m.place(&pids(10..24)),
            Err(SlotError::Exhausted {
                wanted: 14,
                free: 13
            })
        );
        assert_eq!(
            m.place(&pids(0..1)),
            Err(SlotError::AlreadyPlaced(pids(0..1)[0].clone()))
        );
        assert!(
            m.mark_leaving(&[pids(0..1)[0].clone(), pids(2..3)[0].clone()])
                .is_err()
        );
        assert_eq!(m, before);
        assert_eq!(
            vec![m.free(&pids(50..51)[0].clone())],
            vec![Err(SlotError::NotPlaced(pids(50..51)[0].clone()))]
        );
    }

    /// Every process' slot as a scan of the slots finds it: what the index must agree
    /// with after every change.
    fn scanned(m: &SlotMap) -> Vec<(ProcessId, u32)> {
        let mut v: Vec<(ProcessId, u32)> = (m.slots().iter().enumerate())
            .filter_map(|(i, s)| match s {
                SlotState::Occupied(p) | SlotState::Leaving(p) => Some((p.clone(), i as u32)),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }

    /// The slot index (issue 29) answers `slot_of` and `is_running` as a scan of the
    /// slots would through placing, leaving, freeing, retiring and adding nodes, and
    /// takes no part in comparing maps.
    #[test]
    fn the_slot_index_agrees_with_the_slots() {
        let check = |m: &SlotMap| {
            let want = scanned(m);
            let got: Vec<(ProcessId, u32)> =
                m.index.0.iter().map(|(p, s)| (p.clone(), *s)).collect();
            assert_eq!(got, want);
            for p in pids(0..32) {
                let running = want.iter().any(|(q, s)| {
                    *q == p && m.slots()[*s as usize] == SlotState::Occupied(p.clone())
                });
                assert_eq!(m.is_running(&p), running, "{p:?}");
            }
        };
        let mut m = four_by_four();
        m.place(&pids(0..10)).unwrap();
        check(&m);
        let victims = m.victims(3).unwrap();
        m.mark_leaving(&victims).unwrap();
        check(&m);
        m.free(&victims[0]).unwrap();
        check(&m);
        m.place(&pids(10..14)).unwrap();
        check(&m);
        let gone = m.retire_node(1);
        assert!(!gone.is_empty());
        check(&m);
        m.add_node(NodeSpec {
            name: "node5".into(),
            slots: 4,
        });
        m.place(&pids(14..20)).unwrap();
        check(&m);
        // Two maps with the same slots are equal whatever their indexes hold.
        let mut other = m.clone();
        other.index = SlotIndex::default();
        assert_eq!(m, other);
    }
}
