//! `MPI_Comm_spawn` at the parent root: launch the children with the port in their
//! environment, accept their root, kill them if the spawn fails.

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::process::Namespace;
use crate::time::Instant;

use super::auth::BootKey;
use super::handshake::Handshake;
use super::msg::MAX_GROUP;
use super::port::PortName;
use super::role::Role;
use super::trace;
use super::types::SpawnConfig;
use super::{Input, Output, ParentInput, SpawnError};
use crate::trace::InstanceTag;

/// What a spawned child finds in its environment (SPAWN-3).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpawnEnv {
    /// The parent root's port, keyed with the spawn's own key (SPAWN-22): the child
    /// root connects to it.
    pub parent_port: PortName,
    /// The children's group id.
    pub group_id: u64,
    /// How many children were spawned together (the child group's size).
    pub size: u32,
}

impl SpawnEnv {
    /// Variable holding the parent's port address (the port name without its key field,
    /// [`PortName::address`]).
    pub const PORT_VAR: &'static str = "DYNRES_PARENT_PORT";
    /// Variable holding the spawn's key, 64 hex digits (SPAWN-22). Apart from the port
    /// so that the variable naming the port never holds a capability of its own.
    pub const KEY_VAR: &'static str = "DYNRES_SPAWN_KEY";
    /// Variable holding the child group's id (decimal).
    pub const GROUP_VAR: &'static str = "DYNRES_SPAWN_GROUP";
    /// Variable holding the child group's size (decimal).
    pub const SIZE_VAR: &'static str = "DYNRES_SPAWN_SIZE";

    /// The variables to add to every child's environment.
    pub fn to_env(&self) -> Vec<(String, String)> {
        alloc::vec![
            (
                Self::PORT_VAR.to_string(),
                self.parent_port.address().to_string(),
            ),
            (Self::KEY_VAR.to_string(), self.parent_port.key.to_hex()),
            (Self::GROUP_VAR.to_string(), format!("{}", self.group_id)),
            (Self::SIZE_VAR.to_string(), format!("{}", self.size)),
        ]
    }

    /// Reads the variables back in a child. `Ok(None)`: not spawned (no parent port),
    /// so `MPI_Comm_get_parent` is `MPI_COMM_NULL`.
    pub fn from_env<'a>(
        vars: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Option<SpawnEnv>, SpawnError> {
        let (mut port, mut key, mut group, mut size) = (None, None, None, None);
        for (k, v) in vars {
            match k {
                Self::PORT_VAR => port = Some(v),
                Self::KEY_VAR => {
                    key = Some(
                        BootKey::from_hex(v)
                            .ok_or(SpawnError::Config("DYNRES_SPAWN_KEY is not 64 hex digits"))?,
                    )
                }
                Self::GROUP_VAR => {
                    group = Some(
                        v.parse::<u64>()
                            .map_err(|_| SpawnError::Config("DYNRES_SPAWN_GROUP is not a u64"))?,
                    )
                }
                Self::SIZE_VAR => {
                    size = Some(
                        v.parse::<u32>()
                            .map_err(|_| SpawnError::Config("DYNRES_SPAWN_SIZE is not a u32"))?,
                    )
                }
                _ => {}
            }
        }
        match (port, key, group, size) {
            (None, _, _, _) => Ok(None),
            (Some(port), Some(key), Some(group_id), Some(size)) => Ok(Some(SpawnEnv {
                parent_port: PortName::parse_address(port, key)?,
                group_id,
                size,
            })),
            _ => Err(SpawnError::Config("spawn environment incomplete")),
        }
    }
}

/// The parent root of one `MPI_Comm_spawn`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpawnParent {
    hs: Handshake,
    namespace: Namespace,
    count: u32,
    killed: bool,
    out: VecDeque<Output>,
    bugs: crate::bugs::Bugs,
    tag: InstanceTag,
}

impl SpawnParent {
    /// Starts the spawn: the first output is the [`Output::Launch`].
    pub fn new(now: Instant, cfg: SpawnConfig) -> Result<Self, SpawnError> {
        let start = crate::trace::enabled().then(|| trace::encode_parent_start(now, &cfg));
        let mut p = Self::start(now, cfg)?;
        crate::trace::record_start(&mut p, start);
        Ok(p)
    }

    /// The machine id of its transition events: parent group, root rank, child group,
    /// instance.
    fn trace_id(&self) -> String {
        let cfg = self.hs.config();
        // The spawn set the handshake to expect exactly the children's group.
        let child_group = cfg.expect_remote.map_or(0, |(g, _)| g);
        format!(
            "g{}.r{}.c{}.{}",
            cfg.local.group_id, cfg.root, child_group, self.tag.0
        )
    }

    /// A fingerprint of the state without the outputs not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }

    fn start(now: Instant, cfg: SpawnConfig) -> Result<Self, SpawnError> {
        if cfg.maxprocs == 0 || cfg.maxprocs as usize > MAX_GROUP {
            return Err(SpawnError::Config("maxprocs must be 1..=65536"));
        }
        let mut hcfg = cfg.handshake;
        hcfg.expect_remote = Some((cfg.child_group_id, cfg.maxprocs));
        // SPAWN-22: the spawn's messages are keyed with the spawn's key, so the port's
        // own key (if others hold its name) opens nothing here.
        let port = PortName {
            key: cfg.key,
            ..cfg.port
        };
        let hs = Handshake::start(now, Role::Acceptor, port.clone(), hcfg)?;
        let env = SpawnEnv {
            parent_port: port,
            group_id: cfg.child_group_id,
            size: cfg.maxprocs,
        };
        let mut out = VecDeque::new();
        out.push_back(Output::Launch {
            namespace: cfg.child_namespace.clone(),
            count: cfg.maxprocs,
            env: env.to_env(),
        });
        Ok(SpawnParent {
            hs,
            namespace: cfg.child_namespace,
            count: cfg.maxprocs,
            killed: false,
            out,
            bugs: crate::bugs::Bugs::NONE,
            tag: InstanceTag::default(),
        })
    }

    /// Plants bugs for the verification crate's corpus (also into the handshake inside).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bugs: crate::bugs::Bugs) {
        self.bugs = bugs;
        self.hs.plant(bugs);
    }

    /// Planted `RelaunchOnTimeout`: the children launched again whenever the parent's
    /// timer fires while it listens (`SPAWN-3` allows one launch).
    fn planted_relaunches(&self, input: &ParentInput) -> bool {
        self.bugs.has(crate::bugs::Bug::RelaunchOnTimeout)
            && matches!(input, ParentInput::Handshake(Input::Timeout))
            && self.hs.phase() == super::Phase::Listening
    }

    /// Feeds one input (see [`Handshake::handle`]); also takes
    /// [`ParentInput::LaunchFailed`].
    pub fn handle(&mut self, now: Instant, input: ParentInput) -> Result<(), SpawnError> {
        crate::trace::record(self, now, input, Self::step)
    }

    /// [`SpawnParent::handle`] without its transition event.
    fn step(&mut self, now: Instant, input: ParentInput) -> Result<(), SpawnError> {
        if self.planted_relaunches(&input) {
            self.out.push_back(Output::Launch {
                namespace: self.namespace.clone(),
                count: self.count,
                env: Vec::new(),
            });
        }
        let r = match input {
            ParentInput::LaunchFailed { reason }
                if self.bugs.has(crate::bugs::Bug::LaunchFailureKeepsListening) =>
            {
                self.fail_but_keep_listening(reason);
                Ok(())
            }
            ParentInput::LaunchFailed { reason } => {
                // SPAWN-8: the handshake fails with it, so no child that did start can
                // still connect; `drain` adds the kill.
                self.hs.abandon(SpawnError::LaunchFailed { reason });
                Ok(())
            }
            ParentInput::Handshake(input) => self.hs.step(now, input),
        };
        self.drain();
        r
    }

    /// Planted bug `LaunchFailureKeepsListening`: report the launch failure and kill the
    /// children, but leave the handshake listening.
    fn fail_but_keep_listening(&mut self, reason: String) {
        if self.hs.phase() != super::Phase::Failed && !self.killed {
            self.killed = true;
            self.out
                .push_back(Output::Failed(SpawnError::LaunchFailed { reason }));
            self.out.push_back(Output::Kill {
                namespace: self.namespace.clone(),
                count: self.count,
            });
        }
    }

    fn drain(&mut self) {
        while let Some(o) = self.hs.poll_output() {
            let failed = matches!(o, Output::Failed(_));
            self.out.push_back(o);
            if failed && !self.killed && !self.bugs.has(crate::bugs::Bug::NoKillOnSpawnFailure) {
                // SPAWN-8: no child outlives a failed spawn.
                self.killed = true;
                self.out.push_back(Output::Kill {
                    namespace: self.namespace.clone(),
                    count: self.count,
                });
            }
        }
    }

    /// The next thing the driver must do.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// See [`Handshake::poll_timeout`].
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.hs.poll_timeout()
    }

    /// The handshake inside.
    pub fn handshake(&self) -> &Handshake {
        &self.hs
    }

    /// Forged messages dropped so far (SPAWN-22, [`Handshake::forged`]).
    pub fn forged(&self) -> u32 {
        self.hs.forged()
    }

    /// See [`Handshake::eq_except_forged`].
    pub fn eq_except_forged(&self, other: &SpawnParent) -> bool {
        let mut c = self.clone();
        c.hs = other.hs.clone();
        c == *other && self.hs.eq_except_forged(&other.hs)
    }
}

crate::machine::by_inherent_methods!(SpawnParent, ParentInput, Output, SpawnError);

crate::spawn::trace::recorded_by_id!(SpawnParent, ParentInput, ROLE_PARENT, encode_parent_input);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::{Addr, Bootstrap, GroupHeader, HandshakeConfig};
    use alloc::vec;

    #[test]
    fn environment_round_trips_and_rejects_partial_sets() {
        // SPAWN-3
        let key = "ab".repeat(32);
        let port = PortName::parse(&alloc::format!("dynres:2:dgram:01:02:3:{key}")).unwrap();
        let env = SpawnEnv {
            parent_port: port,
            group_id: 77,
            size: 5,
        };
        let vars = env.to_env();
        // SPAWN-22: the port variable holds the address only, the key its own variable.
        assert_eq!(vars[0].1, "dynres:2:dgram:01:02:3");
        assert_eq!(
            (vars[1].0.as_str(), vars[1].1.as_str()),
            (SpawnEnv::KEY_VAR, &*key)
        );
        let back = SpawnEnv::from_env(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(back, Ok(Some(env)));
        assert_eq!(SpawnEnv::from_env([("PATH", "/bin")]), Ok(None));
        assert!(SpawnEnv::from_env([(SpawnEnv::PORT_VAR, vars[0].1.as_str())]).is_err());
        assert!(SpawnEnv::from_env([(SpawnEnv::PORT_VAR, "nonsense")]).is_err());
        // Without the key, or with a key that is not 64 hex digits: no spawn environment.
        for bad_key in [None, Some("ab"), Some(&key[1..]), Some("zz")] {
            let vars = vars.iter().filter(|(k, _)| k != SpawnEnv::KEY_VAR);
            let vars = vars.map(|(k, v)| (k.as_str(), v.as_str()));
            let with = bad_key.map(|k| (SpawnEnv::KEY_VAR, k));
            assert!(
                matches!(
                    SpawnEnv::from_env(vars.chain(with)),
                    Err(SpawnError::Config(_))
                ),
                "{bad_key:?}"
            );
        }
    }

    /// The triple of a group with context id 1 and its table (one-byte addresses).
    fn group(group_id: u64, size: u32) -> HandshakeConfig {
        let h = GroupHeader {
            group_id,
            size,
            context_id: 1,
        };
        HandshakeConfig::new(h, (0..size).map(|r| Addr(vec![9 - r as u8])).collect())
    }

    /// A spawn of `maxprocs` children (group 2) by `parent` on a port of `boot`.
    fn spawn_cfg(boot: Bootstrap, parent: HandshakeConfig, maxprocs: u32) -> SpawnConfig {
        SpawnConfig {
            handshake: parent,
            port: PortName {
                boot,
                dgram: Addr(vec![1]),
                stream: Addr(vec![2]),
                tag: 0,
                key: BootKey([1; 32]),
            },
            maxprocs,
            child_namespace: Namespace::new("kids"),
            child_group_id: 2,
            key: BootKey([2; 32]),
        }
    }

    #[test]
    fn launch_comes_first_and_failure_kills_once() {
        // SPAWN-3, SPAWN-8
        let cfg = spawn_cfg(Bootstrap::Datagram, group(1, 1), 4);
        let mut p = SpawnParent::new(Instant(0), cfg.clone()).unwrap();
        assert!(matches!(
            p.poll_output(),
            Some(Output::Launch { count: 4, .. })
        ));
        assert_eq!(p.poll_output(), None);
        let deadline = p.poll_timeout().unwrap();
        p.handle(deadline, Input::Timeout.into()).unwrap();
        let outs: Vec<Output> = core::iter::from_fn(|| p.poll_output()).collect();
        assert_eq!(
            outs.iter()
                .filter(|o| matches!(o, Output::Kill { .. }))
                .count(),
            1
        );
        assert!(
            outs.iter()
                .any(|o| matches!(o, Output::Failed(SpawnError::Timeout { .. })))
        );
        p.handle(
            deadline,
            ParentInput::LaunchFailed {
                reason: "late".into(),
            },
        )
        .unwrap();
        assert_eq!(p.poll_output(), None, "a decided spawn stays decided");
        assert_eq!(p.poll_timeout(), None);
        let bad = SpawnConfig { maxprocs: 0, ..cfg };
        assert!(SpawnParent::new(Instant(0), bad).is_err());
    }

    #[test]
    fn a_launch_failure_after_the_childrens_hello_fails_both_sides() {
        // SPAWN-8: the launcher may report a failure after the child root said Hello
        // (another child did not start). The parent fails, tells its members, kills
        // once and aborts the child root, which ends failed even if the parent's table
        // and ack reached it first (Ready, then revoked).
        let cfg = spawn_cfg(Bootstrap::Stream, group(1, 2), 1);
        let child_port = PortName {
            key: cfg.key,
            ..cfg.port.clone()
        };
        let mut c = Handshake::connect(Instant(0), child_port, group(2, 1)).unwrap();
        let mut p = SpawnParent::new(Instant(0), cfg).unwrap();
        // Everything `from` wrote on the bootstrap stream goes to `to`.
        fn stream(from: &mut dyn FnMut() -> Option<Output>, to: &mut dyn FnMut(Vec<u8>)) {
            while let Some(o) = from() {
                if let Output::SendStream { bytes } = o {
                    to(bytes);
                }
            }
        }
        let feed =
            |m: &mut SpawnParent, bytes| m.handle(Instant(1), Input::Stream { bytes }.into());
        stream(&mut || c.poll_output(), &mut |b| feed(&mut p, b).unwrap());
        assert_eq!(p.handshake().phase(), crate::spawn::Phase::Endpoints);
        // The parent's HelloAck, table and (after the child's table) ack are on the way.
        let mut to_child = Vec::new();
        stream(&mut || p.poll_output(), &mut |b| to_child.push(b));
        for b in core::mem::take(&mut to_child) {
            c.handle(Instant(1), Input::Stream { bytes: b }).unwrap();
        }
        stream(&mut || c.poll_output(), &mut |b| feed(&mut p, b).unwrap());
        stream(&mut || p.poll_output(), &mut |b| to_child.push(b));
        p.handle(
            Instant(2),
            ParentInput::LaunchFailed {
                reason: "one child did not start".into(),
            },
        )
        .unwrap();
        let outs: Vec<Output> = core::iter::from_fn(|| p.poll_output()).collect();
        assert!(outs.iter().any(|o| matches!(
            o,
            Output::ToMember {
                member: 1,
                msg: crate::spawn::MemberMsg::Failed { .. }
            }
        )));
        assert!(
            outs.iter()
                .any(|o| matches!(o, Output::Failed(SpawnError::LaunchFailed { .. })))
        );
        assert_eq!(
            outs.iter()
                .filter(|o| matches!(o, Output::Kill { .. }))
                .count(),
            1
        );
        assert_eq!(p.handshake().phase(), crate::spawn::Phase::Failed);
        to_child.extend(outs.into_iter().filter_map(|o| match o {
            Output::SendStream { bytes } => Some(bytes),
            _ => None,
        }));
        for b in to_child {
            c.handle(Instant(2), Input::Stream { bytes: b }).unwrap();
        }
        assert!(c.intergroup().is_none());
        assert!(matches!(c.error(), Some(SpawnError::Aborted { .. })));
    }
}
