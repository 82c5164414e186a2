//! Inter-groups, the job's context-id allocator, and the non-root member's side of a
//! handshake.

use alloc::collections::{BTreeSet, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::process::Rank;
use crate::time::Instant;

use super::SpawnError;
use super::auth::BootKey;
use super::msg::{Addr, GroupHeader};
use super::role::Role;
use super::trace;
use super::types::MemberMsg;
use crate::trace::InstanceTag;

/// An inter-group as one process holds it: both groups' triples and endpoint tables.
/// Connections to remote ranks are opened on demand from `remote_endpoints`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InterGroup {
    /// The connection attempt that built it.
    pub session: u64,
    /// Which side this process was on.
    pub role: Role,
    /// This process's rank in the local group.
    pub local_rank: Rank,
    /// The local group's triple.
    pub local: GroupHeader,
    /// The remote group's triple, as the remote root sent it (SPAWN-4).
    pub remote: GroupHeader,
    /// `local_endpoints[r]`: local rank `r`'s address.
    pub local_endpoints: Vec<Addr>,
    /// `remote_endpoints[r]`: remote rank `r`'s address (complete, SPAWN-7).
    pub remote_endpoints: Vec<Addr>,
    /// The key of the inter-group's data connections (SPAWN-23): derived from the
    /// bootstrap key by both roots, handed to every member with the remote triple, so
    /// every rank of both groups holds the same one and no other connection does. Its
    /// `Debug` form never shows it.
    pub data_key: BootKey,
}

impl InterGroup {
    /// `MPI_Comm_disconnect`, local part: gives the context id back to the job's
    /// allocator (SPAWN-5) and consumes the handle.
    pub fn disconnect(self, ids: &mut ContextIds) -> Result<(), SpawnError> {
        ids.release(self.local.context_id)
    }
}

/// The context ids of one job's live inter-groups (SPAWN-5): allocation takes the
/// smallest free id, so the choice is deterministic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContextIds {
    first: u32,
    limit: u32,
    live: BTreeSet<u32>,
    bugs: crate::bugs::Bugs,
}

impl ContextIds {
    /// Ids `first..limit` are available (ids below `first` belong to the job's own
    /// intra-communicators).
    pub fn new(first: u32, limit: u32) -> Self {
        ContextIds {
            first,
            limit,
            live: BTreeSet::new(),
            bugs: crate::bugs::Bugs::NONE,
        }
    }

    /// Plants bugs for the verification crate's corpus.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bugs: crate::bugs::Bugs) {
        self.bugs = bugs;
    }

    /// The smallest free id, now live.
    pub fn allocate(&mut self) -> Result<u32, SpawnError> {
        let mut id = self.first;
        for &l in self.live.range(self.first..) {
            if l != id || self.bugs.has(crate::bugs::Bug::ReuseLiveContextId) {
                break;
            }
            id += 1;
        }
        if id >= self.limit {
            return Err(SpawnError::ContextIdsExhausted);
        }
        self.live.insert(id);
        Ok(id)
    }

    /// Makes a chosen id live: a group whose members each hold an allocator agrees on
    /// one id free at all of them (the smallest such, so still deterministic) and each
    /// member reserves it. An id outside `first..limit` is `Config`; a live one is
    /// `ContextIdsExhausted` for that id.
    pub fn reserve(&mut self, id: u32) -> Result<(), SpawnError> {
        if id < self.first || id >= self.limit {
            return Err(SpawnError::Config(
                "context id outside the allocator's range",
            ));
        }
        if !self.live.insert(id) {
            return Err(SpawnError::ContextIdsExhausted);
        }
        Ok(())
    }

    /// The allocator's range `first..limit`.
    pub fn range(&self) -> core::ops::Range<u32> {
        self.first..self.limit
    }

    /// Frees a live id; freeing one that is not live is an error.
    pub fn release(&mut self, id: u32) -> Result<(), SpawnError> {
        if self.live.remove(&id) {
            Ok(())
        } else {
            Err(SpawnError::ContextIdNotLive(id))
        }
    }

    /// Whether `id` is live.
    pub fn is_live(&self, id: u32) -> bool {
        self.live.contains(&id)
    }

    /// Number of live ids.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }
}

/// What a [`Member`] tells its driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemberOutput {
    /// Tell the local application: inter-group ready (`MPI_Comm_spawn` /
    /// `MPI_Comm_get_parent` / accept / connect returns).
    Ready(InterGroup),
    /// Tell the local application: the collective call failed; no handle exists.
    Failed(SpawnError),
}

/// A non-root member of a group taking part in a spawn / accept / connect / join: waits
/// for its root's [`MemberMsg`]s and assembles the inter-group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    role: Role,
    rank: Rank,
    local: GroupHeader,
    local_endpoints: Vec<Addr>,
    remote: Option<(u64, GroupHeader, BootKey)>,
    result: Option<Result<InterGroup, SpawnError>>,
    out: VecDeque<MemberOutput>,
    tag: InstanceTag,
}

impl Member {
    /// Member `rank` of the local group described by `local` / `local_endpoints`.
    pub fn new(role: Role, rank: Rank, local: GroupHeader, local_endpoints: Vec<Addr>) -> Self {
        let start = crate::trace::enabled()
            .then(|| trace::encode_member_start(role, rank, &local, &local_endpoints));
        let mut m = Member {
            role,
            rank,
            local,
            local_endpoints,
            remote: None,
            result: None,
            out: VecDeque::new(),
            tag: InstanceTag::default(),
        };
        crate::trace::record_start(&mut m, start);
        m
    }

    /// The machine id of its transition events: local group, rank, role, instance.
    fn trace_id(&self) -> String {
        format!(
            "g{}.r{}.{}.{}",
            self.local.group_id,
            self.rank,
            self.role.letter(),
            self.tag.0
        )
    }

    /// A fingerprint of the state without the outputs not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }

    /// Handles one message from the root. After a failure everything is ignored; after
    /// success only `Failed` (a revocation, SPAWN-8) has an effect. Endpoints before the
    /// triple, or of the wrong size, are errors and change nothing.
    pub fn handle(&mut self, now: Instant, msg: MemberMsg) -> Result<(), SpawnError> {
        // Members keep no timers: `now` only stamps the event.
        crate::trace::record(self, now, msg, |m, _, msg| m.step(msg))
    }

    fn step(&mut self, msg: MemberMsg) -> Result<(), SpawnError> {
        match (&self.result, &msg) {
            (Some(Err(_)), _)
            | (Some(Ok(_)), MemberMsg::RemoteGroup { .. } | MemberMsg::RemoteEndpoints { .. }) => {
                return Ok(());
            }
            _ => {}
        }
        match msg {
            MemberMsg::RemoteGroup {
                session,
                remote,
                data_key,
            } => {
                self.remote = Some((session, remote, data_key));
                Ok(())
            }
            MemberMsg::RemoteEndpoints { session, endpoints } => {
                let Some((s, remote, data_key)) = self.remote else {
                    return Err(SpawnError::Unexpected {
                        what: "RemoteEndpoints before RemoteGroup",
                    });
                };
                if s != session {
                    return Err(SpawnError::WrongSession {
                        expected: s,
                        got: session,
                    });
                }
                // SPAWN-7: a handle only ever holds a complete table.
                if endpoints.len() != remote.size as usize {
                    return Err(SpawnError::EndpointCount {
                        expected: remote.size,
                        got: endpoints.len() as u64,
                    });
                }
                let ig = InterGroup {
                    session,
                    role: self.role,
                    local_rank: self.rank,
                    local: self.local,
                    remote,
                    local_endpoints: self.local_endpoints.clone(),
                    remote_endpoints: endpoints,
                    data_key,
                };
                self.out.push_back(MemberOutput::Ready(ig.clone()));
                self.result = Some(Ok(ig));
                Ok(())
            }
            MemberMsg::Failed { session, error } => {
                if let Some((s, _, _)) = self.remote {
                    if s != session {
                        return Err(SpawnError::WrongSession {
                            expected: s,
                            got: session,
                        });
                    }
                }
                self.out.push_back(MemberOutput::Failed(error.clone()));
                self.result = Some(Err(error));
                Ok(())
            }
        }
    }

    /// The next thing to tell the application.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<MemberOutput> {
        self.out.pop_front()
    }

    /// Members keep no timers: the root decides success or failure for the group.
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// The inter-group, once ready (`MPI_Comm_get_parent` on a spawned child).
    pub fn intergroup(&self) -> Option<&InterGroup> {
        match &self.result {
            Some(Ok(ig)) => Some(ig),
            _ => None,
        }
    }

    /// The failure, if the handshake failed.
    pub fn error(&self) -> Option<&SpawnError> {
        match &self.result {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }
}

crate::machine::by_inherent_methods!(Member, MemberMsg, MemberOutput, SpawnError);

impl crate::trace::Recorded for Member {
    const ROLE: &'static str = trace::ROLE_MEMBER;
    // Rejected inputs are part of the recorded behaviour (SPAWN-10), so replay checks them.
    const RESULT: crate::trace::ResultRecord = crate::trace::ResultRecord::Hashed;
    fn key(&self) -> crate::trace::TraceKey {
        crate::trace::TraceKey::Id(self.trace_id())
    }
    fn queue(&mut self) -> &mut VecDeque<MemberOutput> {
        &mut self.out
    }
    fn tag(&mut self) -> Option<&mut InstanceTag> {
        Some(&mut self.tag)
    }
    fn encode_input(input: &MemberMsg) -> Vec<u8> {
        trace::encode_member_msg(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// Rank 1 of the local group 1 (two processes, context id 1), as `role`.
    fn member(role: Role) -> Member {
        let h = GroupHeader {
            group_id: 1,
            size: 2,
            context_id: 1,
        };
        Member::new(role, 1, h, vec![Addr(vec![1]), Addr(vec![2])])
    }

    /// The root's `RemoteGroup` of session 9 naming `remote`.
    fn remote_group(remote: GroupHeader) -> MemberMsg {
        MemberMsg::RemoteGroup {
            session: 9,
            remote,
            data_key: BootKey([9; 32]),
        }
    }

    /// The remote group 9 of `size` processes (context id 5).
    fn remote(size: u32) -> GroupHeader {
        GroupHeader {
            group_id: 9,
            size,
            context_id: 5,
        }
    }

    #[test]
    fn context_ids_are_lowest_free_and_unique() {
        // SPAWN-5
        let mut ids = ContextIds::new(1, 4);
        assert_eq!(ids.allocate(), Ok(1));
        assert_eq!(ids.allocate(), Ok(2));
        assert_eq!(ids.allocate(), Ok(3));
        assert_eq!(ids.allocate(), Err(SpawnError::ContextIdsExhausted));
        ids.release(2).unwrap();
        assert_eq!(ids.release(2), Err(SpawnError::ContextIdNotLive(2)));
        assert_eq!(ids.allocate(), Ok(2));
        assert_eq!(ids.live_count(), 3);
        // A reserved id is live, taken ids and ids out of range are refused.
        let mut ids = ContextIds::new(10, 20);
        ids.reserve(12).unwrap();
        assert!(ids.is_live(12));
        assert_eq!(ids.reserve(12), Err(SpawnError::ContextIdsExhausted));
        assert!(matches!(ids.reserve(9), Err(SpawnError::Config(_))));
        assert!(matches!(ids.reserve(20), Err(SpawnError::Config(_))));
        assert_eq!(ids.allocate(), Ok(10));
        assert_eq!(ids.allocate(), Ok(11));
        assert_eq!(ids.allocate(), Ok(13));
        assert_eq!(ids.range(), 10..20);
    }

    /// Kills `<` → `<=` in `ContextIds::reserve`: the range `first..limit` includes
    /// `first` (SPAWN-5: a group agrees on the smallest id free at all its members, which
    /// is `first` while none is live), so `first` can be reserved, `first - 1` cannot.
    #[test]
    fn the_first_id_of_the_range_can_be_reserved() {
        let mut ids = ContextIds::new(10, 20);
        assert!(matches!(ids.reserve(9), Err(SpawnError::Config(_))));
        assert_eq!(ids.reserve(10), Ok(()));
        assert!(ids.is_live(10));
        assert_eq!(ids.reserve(19), Ok(()));
        assert_eq!(ids.allocate(), Ok(11), "10 is taken");
    }

    /// A member never asks its driver for a timer (spec/spawn.md §4): not while it
    /// waits, not once ready, not after its root revoked the handle, because its root
    /// decides success or failure for the whole group (SPAWN-8).
    #[test]
    fn a_member_never_asks_for_a_timer() {
        let remote = remote(1);
        let mut m = member(Role::Initiator);
        assert_eq!(m.poll_timeout(), None);
        m.handle(Instant(5), remote_group(remote)).unwrap();
        assert_eq!(m.poll_timeout(), None);
        m.handle(
            Instant(6),
            MemberMsg::RemoteEndpoints {
                session: 9,
                endpoints: vec![Addr(vec![3])],
            },
        )
        .unwrap();
        assert!(m.intergroup().is_some());
        assert_eq!(m.poll_timeout(), None);
        m.handle(
            Instant(7),
            MemberMsg::Failed {
                session: 9,
                error: SpawnError::StreamClosed,
            },
        )
        .unwrap();
        assert_eq!(m.poll_timeout(), None);
    }

    #[test]
    fn member_rejects_short_tables_and_ignores_late_messages() {
        let mut m = member(Role::Acceptor);
        let remote = remote(2);
        assert!(
            m.handle(
                Instant(0),
                MemberMsg::RemoteEndpoints {
                    session: 9,
                    endpoints: vec![]
                }
            )
            .is_err()
        );
        m.handle(Instant(0), remote_group(remote)).unwrap();
        let before = m.clone();
        assert!(matches!(
            m.handle(
                Instant(0),
                MemberMsg::RemoteEndpoints {
                    session: 9,
                    endpoints: vec![Addr(vec![3])]
                }
            ),
            Err(SpawnError::EndpointCount { .. })
        ));
        assert_eq!(m, before);
        m.handle(
            Instant(0),
            MemberMsg::RemoteEndpoints {
                session: 9,
                endpoints: vec![Addr(vec![3]), Addr(vec![4])],
            },
        )
        .unwrap();
        assert!(matches!(m.poll_output(), Some(MemberOutput::Ready(_))));
        m.handle(Instant(0), remote_group(remote)).unwrap();
        assert_eq!(m.poll_output(), None);
        // SPAWN-8: a revocation drops the handle.
        m.handle(
            Instant(0),
            MemberMsg::Failed {
                session: 9,
                error: SpawnError::StreamClosed,
            },
        )
        .unwrap();
        assert!(m.intergroup().is_none());
        assert_eq!(
            m.poll_output(),
            Some(MemberOutput::Failed(SpawnError::StreamClosed))
        );
    }

    /// Kills `Member::error` without its `Some(Err(e))` arm (→ always `None`): a member
    /// whose root reports a failure holds no handle and says why (SPAWN-8), and only then.
    #[test]
    fn a_failed_member_reports_why() {
        let mut m = member(Role::Acceptor);
        assert_eq!(m.error(), None, "undecided");
        m.handle(
            Instant(0),
            MemberMsg::Failed {
                session: 9,
                error: SpawnError::PeerUnreachable { retries: 3 },
            },
        )
        .unwrap();
        assert_eq!(m.error(), Some(&SpawnError::PeerUnreachable { retries: 3 }));
        assert!(m.intergroup().is_none());
    }

    /// Kills `Member::fingerprint` → 0: the state fingerprint of a member's trace lines
    /// (spec/verification.md §6) tells its states apart, so a replay notices a member
    /// that took a different step; it does not depend on the undrained outputs.
    #[test]
    fn a_member_fingerprint_follows_its_state() {
        let remote = remote(1);
        let mut m = member(Role::Initiator);
        let fresh = m.fingerprint();
        assert_eq!(m.fingerprint(), fresh, "the same state");
        m.handle(Instant(0), remote_group(remote)).unwrap();
        let told = m.fingerprint();
        assert_ne!(told, fresh, "the remote triple is state");
        m.handle(
            Instant(1),
            MemberMsg::RemoteEndpoints {
                session: 9,
                endpoints: vec![Addr(vec![3])],
            },
        )
        .unwrap();
        let ready = m.fingerprint();
        assert_ne!(ready, told, "the handle is state");
        assert!(m.poll_output().is_some(), "Ready was queued");
        assert_eq!(m.fingerprint(), ready, "draining outputs is not a step");
    }
}
