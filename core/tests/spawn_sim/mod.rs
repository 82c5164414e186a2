//! A deterministic in-memory world for the spawn / connect / join machines: simulated
//! time, a seeded fault-injecting datagram channel (drop, duplicate, reorder, corrupt),
//! ordered streams delivered in random chunks, a launcher, and the local-group channel
//! carrying the roots' member messages. Shared by the `spawn_*` integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use dynres_core::spawn::{
    Addr, BootKey, Bootstrap, ContextIds, GroupHeader, Handshake, HandshakeConfig, Input,
    InterGroup, Join, JoinInput, Member, MemberOutput, Output, ParentInput, PortName, Ports, Role,
    SpawnConfig, SpawnEnv, SpawnError, SpawnParent,
};
use dynres_core::wire::WireError;
use dynres_core::{Duration, Instant, Namespace};

/// splitmix64: tiny, seedable, good enough to drive fault injection.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }
}

/// What the datagram channel does to each datagram.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub drop: u32,
    pub duplicate: u32,
    pub corrupt: u32,
    /// Each copy is delayed uniformly in `0..=max_delay` ns, which reorders.
    pub max_delay: u64,
}

impl Faults {
    pub const NONE: Faults = Faults {
        drop: 0,
        duplicate: 0,
        corrupt: 0,
        max_delay: 0,
    };
    /// The default lossy channel of the tests.
    pub const LOSSY: Faults = Faults {
        drop: 100,
        duplicate: 100,
        corrupt: 50,
        max_delay: 300_000,
    };
    pub const BLACKHOLE: Faults = Faults {
        drop: 1000,
        duplicate: 0,
        corrupt: 0,
        max_delay: 0,
    };
}

// Test-only: a handful of machines per world, boxing buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum Machine {
    Spawn(SpawnParent),
    Hs(Handshake),
    Join(Join),
}

/// What the simulation feeds a root: an input every root takes, or one that only a
/// spawn's parent (a launch failure) or a join (its stream's bytes) takes.
#[derive(Debug)]
pub enum SimInput {
    Boot(Input),
    JoinStream(Vec<u8>),
    LaunchFailed(String),
}

impl From<Input> for SimInput {
    fn from(input: Input) -> Self {
        SimInput::Boot(input)
    }
}

impl Machine {
    fn handle(&mut self, now: Instant, input: impl Into<SimInput>) -> Result<(), SpawnError> {
        match (self, input.into()) {
            (Machine::Spawn(m), SimInput::Boot(i)) => m.handle(now, i.into()),
            (Machine::Spawn(m), SimInput::LaunchFailed(reason)) => {
                m.handle(now, ParentInput::LaunchFailed { reason })
            }
            (Machine::Hs(m), SimInput::Boot(i)) => m.handle(now, i),
            (Machine::Join(m), SimInput::Boot(i)) => m.handle(now, i.into()),
            (Machine::Join(m), SimInput::JoinStream(bytes)) => {
                m.handle(now, JoinInput::JoinStream { bytes })
            }
            (_, input) => panic!("{input:?} is routed only to a root that takes it"),
        }
    }
    fn poll_output(&mut self) -> Option<Output> {
        match self {
            Machine::Spawn(m) => m.poll_output(),
            Machine::Hs(m) => m.poll_output(),
            Machine::Join(m) => m.poll_output(),
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Machine::Spawn(m) => m.poll_timeout(),
            Machine::Hs(m) => m.poll_timeout(),
            Machine::Join(m) => m.poll_timeout(),
        }
    }
    pub fn handle_for_test(&mut self, now: Instant, input: Input) -> Result<(), SpawnError> {
        self.handle(now, input)
    }
    pub fn poll_output_for_test(&mut self) -> Option<Output> {
        self.poll_output()
    }
    pub fn handshake(&self) -> Option<&Handshake> {
        match self {
            Machine::Spawn(m) => Some(m.handshake()),
            Machine::Hs(m) => Some(m),
            Machine::Join(m) => m.handshake(),
        }
    }
}

/// One root process and what it was told.
pub struct Root {
    pub name: String,
    pub dgram: Addr,
    pub stream: Addr,
    pub m: Machine,
    pub group_id: u64,
    pub alive: bool,
    pub stream_peer: Option<usize>,
    pub join_peer: Option<usize>,
    pub ready: Vec<InterGroup>,
    pub failed: Vec<SpawnError>,
    pub kills: Vec<(Namespace, u32)>,
    pub launches: u32,
}

impl Root {
    /// The handle the application holds at the end: ready and not revoked.
    pub fn handle(&self) -> Option<&InterGroup> {
        if self.failed.is_empty() {
            self.ready.last()
        } else {
            None
        }
    }
}

/// A group's non-root members.
pub struct Group {
    pub namespace: Namespace,
    pub header: GroupHeader,
    pub endpoints: Vec<Addr>,
    pub root: usize,
    pub members: BTreeMap<u32, Member>,
    pub ready: BTreeMap<u32, InterGroup>,
    pub failed: BTreeMap<u32, SpawnError>,
    pub alive: bool,
}

enum Event {
    Datagram {
        to: usize,
        from: Addr,
        bytes: Vec<u8>,
        corrupted: bool,
    },
    Stream {
        to: usize,
        bytes: Vec<u8>,
    },
    StreamClosed {
        to: usize,
    },
    Join {
        to: usize,
        bytes: Vec<u8>,
    },
    Launch {
        parent: usize,
        namespace: Namespace,
        count: u32,
        env: Vec<(String, String)>,
    },
}

/// How the launcher behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// Starts the children after 1..5 ms.
    Normal,
    /// Never starts anything (a hung launch).
    Hang,
    /// Reports failure.
    Fail,
    /// Starts one child fewer... no: tells the children a wrong group size.
    WrongSize,
}

pub struct Stats {
    pub datagrams: u64,
    pub corrupted_delivered: u64,
    pub checksum_errors: u64,
    pub rejected_inputs: u64,
    pub steps: u64,
}

pub struct Sim {
    pub now: Instant,
    pub rng: Rng,
    pub faults: Faults,
    pub launcher: Launcher,
    pub roots: Vec<Root>,
    pub groups: BTreeMap<u64, Group>,
    pub child_cfg: ChildCfg,
    events: BTreeMap<(Instant, u64), Event>,
    seq: u64,
    stream_clock: BTreeMap<usize, Instant>,
    pub stats: Stats,
    /// Every datagram ever delivered, for replay tests.
    pub delivered_log: Vec<(usize, Addr, Vec<u8>)>,
    /// Mixed into every key of this world: two worlds with different salts are two
    /// runs of the driver, whose random keys differ (SPAWN-22).
    pub key_salt: u8,
}

/// How spawned children configure their handshake.
#[derive(Clone, Copy, Debug)]
pub struct ChildCfg {
    pub timeout: Duration,
    pub rto: Duration,
    pub max_retries: u32,
    pub mtu: usize,
    pub endpoint_len: usize,
}

pub fn endpoints(group_id: u64, size: u32, len: usize) -> Vec<Addr> {
    (0..size)
        .map(|r| {
            let mut a = Vec::with_capacity(len);
            a.extend_from_slice(&group_id.to_be_bytes());
            a.extend_from_slice(&r.to_be_bytes());
            a.resize(len.max(12), 0xee);
            Addr(a)
        })
        .collect()
}

pub fn hs_config(header: GroupHeader, eps: Vec<Addr>, c: &ChildCfg) -> HandshakeConfig {
    let mut cfg = HandshakeConfig::new(header, eps);
    cfg.timeout = c.timeout;
    cfg.datagram.rto = c.rto;
    cfg.datagram.max_retries = c.max_retries;
    cfg.datagram.mtu = c.mtu;
    cfg
}

impl Default for ChildCfg {
    fn default() -> Self {
        ChildCfg {
            timeout: Duration::from_millis(2_000),
            rto: Duration::from_millis(1),
            max_retries: 10,
            mtu: 2048,
            endpoint_len: 24,
        }
    }
}

impl Sim {
    pub fn new(seed: u64, faults: Faults) -> Self {
        Sim {
            now: Instant(0),
            rng: Rng::new(seed),
            faults,
            launcher: Launcher::Normal,
            roots: Vec::new(),
            groups: BTreeMap::new(),
            child_cfg: ChildCfg::default(),
            events: BTreeMap::new(),
            seq: 0,
            stream_clock: BTreeMap::new(),
            stats: Stats {
                datagrams: 0,
                corrupted_delivered: 0,
                checksum_errors: 0,
                rejected_inputs: 0,
                steps: 0,
            },
            delivered_log: Vec::new(),
            key_salt: 0,
        }
    }

    fn addr(kind: u8, idx: usize) -> Addr {
        Addr(vec![kind, (idx >> 8) as u8, idx as u8])
    }

    /// A server group of `s` ranks accepts, a client group of `c` ranks connects (the
    /// port reaches it as a string: name service, command line, …); with `own_session`
    /// the client numbers its attempt itself. Returns (server root, client root).
    pub fn accept_connect(
        &mut self,
        boot: Bootstrap,
        s: u32,
        c: u32,
        own_session: bool,
    ) -> (usize, usize) {
        let mut server_ports = Ports::new();
        let mut server_ctx = ContextIds::new(1, 1 << 16);
        let mut client_ctx = ContextIds::new(1, 1 << 16);
        let port = self.next_port(&mut server_ports, boot);
        let sh = GroupHeader {
            group_id: 1,
            size: s,
            context_id: server_ctx.allocate().expect("a context id"),
        };
        let seps = endpoints(1, s, 20);
        let server = Handshake::accept(
            self.now,
            port.clone(),
            hs_config(sh, seps.clone(), &self.child_cfg),
        )
        .expect("server handshake");
        let si = self.add_root(
            "server",
            Machine::Hs(server),
            sh,
            seps,
            Role::Acceptor,
            Namespace::new("server"),
        );
        let parsed = PortName::parse(&port.to_string()).expect("own port parses");
        let ch = GroupHeader {
            group_id: 2,
            size: c,
            context_id: client_ctx.allocate().expect("a context id"),
        };
        let ceps = endpoints(2, c, 20);
        let mut ccfg = hs_config(ch, ceps.clone(), &self.child_cfg);
        if own_session {
            ccfg.session = Some(0xA77E_0000 + u64::from(c));
        }
        let client = Handshake::connect(self.now, parsed, ccfg).expect("client handshake");
        let ci = self.add_root(
            "client",
            Machine::Hs(client),
            ch,
            ceps,
            Role::Initiator,
            Namespace::new("client"),
        );
        (si, ci)
    }

    /// Two singleton groups that join over a byte stream (ports of bootstrap `boot`;
    /// `same_port`: both advertise one port, SPAWN-14). Returns their roots.
    pub fn join_pair(&mut self, boot: Bootstrap, same_port: bool) -> (usize, usize) {
        let mut ports = Ports::new();
        let pa = self.next_port(&mut ports, boot);
        let pb = if same_port {
            pa.clone()
        } else {
            self.next_port(&mut ports, boot)
        };
        let add = |sim: &mut Sim, port: PortName, group_id: u64, role: Role, name| {
            let h = GroupHeader {
                group_id,
                size: 1,
                context_id: 1,
            };
            let eps = endpoints(group_id, 1, 16);
            let j =
                Join::new(sim.now, port, hs_config(h, eps.clone(), &sim.child_cfg)).expect("join");
            sim.add_root(name, Machine::Join(j), h, eps, role, Namespace::new(name))
        };
        let a = add(self, pa, 31, Role::Acceptor, "join-a");
        let b = add(self, pb, 32, Role::Initiator, "join-b");
        self.roots[a].join_peer = Some(b);
        self.roots[b].join_peer = Some(a);
        (a, b)
    }

    /// The key of the port of root `i` (the driver's random draw, fixed here so the
    /// fault injection's random sequence is the one the tests were tuned with).
    pub fn port_key(&self, i: usize) -> BootKey {
        BootKey([0xa0 ^ i as u8 ^ self.key_salt; 32])
    }

    /// The key of the spawn of parent root `i` (SPAWN-22: not its port's).
    pub fn spawn_key(&self, i: usize) -> BootKey {
        BootKey([0x50 ^ i as u8 ^ self.key_salt; 32])
    }

    /// A port on the next root's addresses.
    pub fn next_port(&self, ports: &mut Ports, boot: Bootstrap) -> PortName {
        let i = self.roots.len();
        ports
            .open_port(
                Self::addr(0xd0, i),
                Self::addr(0x50, i),
                boot,
                self.port_key(i),
            )
            .unwrap()
    }

    /// Adds a root and its group's members.
    pub fn add_root(
        &mut self,
        name: &str,
        m: Machine,
        header: GroupHeader,
        eps: Vec<Addr>,
        role: Role,
        namespace: Namespace,
    ) -> usize {
        let i = self.roots.len();
        self.roots.push(Root {
            name: name.to_string(),
            dgram: Self::addr(0xd0, i),
            stream: Self::addr(0x50, i),
            m,
            group_id: header.group_id,
            alive: true,
            stream_peer: None,
            join_peer: None,
            ready: Vec::new(),
            failed: Vec::new(),
            kills: Vec::new(),
            launches: 0,
        });
        let members = (1..header.size)
            .map(|r| (r, Member::new(role, r, header, eps.clone())))
            .collect();
        self.groups.insert(
            header.group_id,
            Group {
                namespace,
                header,
                endpoints: eps,
                root: i,
                members,
                ready: BTreeMap::new(),
                failed: BTreeMap::new(),
                alive: true,
            },
        );
        i
    }

    /// Adds a spawning parent group of `parent_size` and returns its root index.
    pub fn add_spawn(
        &mut self,
        ports: &mut Ports,
        boot: Bootstrap,
        parent_size: u32,
        maxprocs: u32,
        ctx: &mut ContextIds,
    ) -> usize {
        let port = self.next_port(ports, boot);
        let header = GroupHeader {
            group_id: 100 + self.roots.len() as u64,
            size: parent_size,
            context_id: ctx.allocate().unwrap(),
        };
        let eps = endpoints(header.group_id, parent_size, self.child_cfg.endpoint_len);
        let cfg = SpawnConfig {
            handshake: hs_config(header, eps.clone(), &self.child_cfg),
            port,
            maxprocs,
            child_namespace: Namespace::new(format!("child-of-{}", header.group_id)),
            child_group_id: 10_000 + header.group_id,
            key: self.spawn_key(self.roots.len()),
        };
        let m = SpawnParent::new(self.now, cfg).unwrap();
        self.add_root(
            "parent",
            Machine::Spawn(m),
            header,
            eps,
            Role::Acceptor,
            Namespace::new(format!("job-{}", header.group_id)),
        )
    }

    fn schedule(&mut self, at: Instant, e: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), e);
    }

    fn send_datagram(&mut self, from: usize, to: Addr, bytes: Vec<u8>) {
        self.stats.datagrams += 1;
        let Some(dst) = self.roots.iter().position(|r| r.dgram == to) else {
            return;
        };
        let f = self.faults;
        if self.rng.chance(f.drop) {
            return;
        }
        let copies = if self.rng.chance(f.duplicate) { 2 } else { 1 };
        for _ in 0..copies {
            let mut b = bytes.clone();
            let corrupted = self.rng.chance(f.corrupt);
            if corrupted {
                for _ in 0..=self.rng.below(3) {
                    let i = self.rng.below(b.len() as u64) as usize;
                    b[i] ^= 1 << self.rng.below(8);
                }
            }
            let delay = if f.max_delay == 0 {
                1
            } else {
                1 + self.rng.below(f.max_delay)
            };
            let from_addr = self.roots[from].dgram.clone();
            self.schedule(
                self.now + Duration(delay),
                Event::Datagram {
                    to: dst,
                    from: from_addr,
                    bytes: b,
                    corrupted,
                },
            );
        }
    }

    /// Ordered delivery in random chunks: each chunk is scheduled after the previous one
    /// on the same direction.
    fn send_stream(&mut self, from: usize, bytes: Vec<u8>, close: bool) {
        let Some(to) = self.roots[from].stream_peer else {
            return;
        };
        let mut at = self
            .stream_clock
            .get(&from)
            .copied()
            .unwrap_or(self.now)
            .max(self.now);
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = 1 + self.rng.below(rest.len() as u64) as usize;
            at = at + Duration(1 + self.rng.below(20_000));
            self.schedule(
                at,
                Event::Stream {
                    to,
                    bytes: rest[..n].to_vec(),
                },
            );
            rest = &rest[n..];
        }
        if close {
            at = at + Duration(1);
            self.schedule(at, Event::StreamClosed { to });
        }
        self.stream_clock.insert(from, at);
    }

    fn process_outputs(&mut self, i: usize) {
        while let Some(o) = self.roots[i].m.poll_output() {
            match o {
                Output::SendDatagram { to, bytes } => self.send_datagram(i, to, bytes),
                Output::OpenStream { to } => {
                    match self.roots.iter().position(|r| r.stream == to && r.alive) {
                        Some(j) => {
                            self.roots[i].stream_peer = Some(j);
                            self.roots[j].stream_peer = Some(i);
                        }
                        None => {
                            let at = self.now + Duration(10);
                            self.schedule(at, Event::StreamClosed { to: i });
                        }
                    }
                }
                Output::SendStream { bytes } => self.send_stream(i, bytes, false),
                Output::CloseStream => {
                    self.send_stream(i, Vec::new(), true);
                }
                Output::SendJoin { bytes } => {
                    if let Some(j) = self.roots[i].join_peer {
                        let at = self.now + Duration(1 + self.rng.below(50_000));
                        self.schedule(at, Event::Join { to: j, bytes });
                    }
                }
                Output::Launch {
                    namespace,
                    count,
                    env,
                } => {
                    self.roots[i].launches += 1;
                    match self.launcher {
                        Launcher::Hang => {}
                        Launcher::Fail => {
                            let now = self.now;
                            let r = self.roots[i]
                                .m
                                .handle(now, SimInput::LaunchFailed("no slots".into()));
                            assert!(r.is_ok());
                        }
                        Launcher::Normal | Launcher::WrongSize => {
                            let at = self.now + Duration::from_millis(1 + self.rng.below(4));
                            self.schedule(
                                at,
                                Event::Launch {
                                    parent: i,
                                    namespace,
                                    count,
                                    env,
                                },
                            );
                        }
                    }
                }
                Output::Kill { namespace, count } => {
                    self.roots[i].kills.push((namespace.clone(), count));
                    for g in self
                        .groups
                        .values_mut()
                        .filter(|g| g.namespace == namespace)
                    {
                        g.alive = false;
                        self.roots[g.root].alive = false;
                    }
                }
                Output::ToMember { member, msg } => {
                    let gid = self.roots[i].group_id;
                    let now = self.now;
                    let g = self.groups.get_mut(&gid).expect("group");
                    let m = g.members.get_mut(&member).expect("member rank exists");
                    m.handle(now, msg)
                        .expect("roots send members well-formed messages");
                    while let Some(o) = m.poll_output() {
                        match o {
                            MemberOutput::Ready(ig) => {
                                g.ready.insert(member, ig);
                            }
                            MemberOutput::Failed(e) => {
                                g.ready.remove(&member);
                                g.failed.insert(member, e);
                            }
                        }
                    }
                }
                Output::Ready(ig) => self.roots[i].ready.push(ig),
                Output::Failed(e) => self.roots[i].failed.push(e),
            }
        }
    }

    fn launch(
        &mut self,
        parent: usize,
        namespace: Namespace,
        _count: u32,
        env: Vec<(String, String)>,
    ) {
        let vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut env = SpawnEnv::from_env(vars).unwrap().expect("spawned");
        if self.launcher == Launcher::WrongSize {
            env.size += 1;
        }
        // The children are a new job: a fresh context-id allocator.
        let mut ctx = ContextIds::new(1, 1 << 16);
        let header = GroupHeader {
            group_id: env.group_id,
            size: env.size,
            context_id: ctx.allocate().unwrap(),
        };
        let eps = endpoints(header.group_id, env.size, self.child_cfg.endpoint_len);
        let cfg = hs_config(header, eps.clone(), &self.child_cfg);
        let hs = Handshake::connect(self.now, env.parent_port, cfg).unwrap();
        let name = format!("child-root-of-{}", self.roots[parent].name);
        let i = self.add_root(
            &name,
            Machine::Hs(hs),
            header,
            eps,
            Role::Initiator,
            namespace,
        );
        self.process_outputs(i);
    }

    fn deliver(&mut self, to: usize, input: SimInput, corrupted: bool) {
        if !self.roots[to].alive {
            return;
        }
        let now = self.now;
        if let SimInput::Boot(Input::Datagram { from, bytes }) = &input {
            self.delivered_log.push((to, from.clone(), bytes.clone()));
        }
        let r = self.roots[to].m.handle(now, input);
        if corrupted {
            self.stats.corrupted_delivered += 1;
        }
        match r {
            Ok(()) => assert!(
                !corrupted,
                "a corrupted datagram was accepted by {}",
                self.roots[to].name
            ),
            Err(SpawnError::Wire(WireError::Checksum { .. })) => self.stats.checksum_errors += 1,
            Err(e) => {
                assert!(!corrupted, "corruption not detected as such: {e}");
                self.stats.rejected_inputs += 1;
            }
        }
        self.process_outputs(to);
    }

    /// Schedules one datagram for `to`, as if sent by `from`, bypassing the faults.
    pub fn inject_datagram(&mut self, to: usize, from: Addr, bytes: Vec<u8>) {
        let at = self.now + Duration(1);
        self.schedule(
            at,
            Event::Datagram {
                to,
                from,
                bytes,
                corrupted: false,
            },
        );
    }

    /// Runs until nothing is scheduled and no timer is armed.
    pub fn run(&mut self) {
        for i in 0..self.roots.len() {
            self.process_outputs(i);
        }
        loop {
            self.stats.steps += 1;
            assert!(
                self.stats.steps < 2_000_000,
                "simulation does not terminate"
            );
            let timer = self
                .roots
                .iter()
                .enumerate()
                .filter(|(_, r)| r.alive)
                .filter_map(|(i, r)| r.m.poll_timeout().map(|t| (t, i)))
                .min();
            let event = self.events.keys().next().copied();
            match (timer, event) {
                (None, None) => break,
                (Some((t, i)), e) if e.is_none_or(|(et, _)| t <= et) => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    self.roots[i]
                        .m
                        .handle(now, Input::Timeout)
                        .expect("timeouts are always taken");
                    self.process_outputs(i);
                }
                (_, Some(key)) => {
                    let e = self.events.remove(&key).expect("event");
                    self.now = self.now.max(key.0);
                    match e {
                        Event::Datagram {
                            to,
                            from,
                            bytes,
                            corrupted,
                        } => self.deliver(to, Input::Datagram { from, bytes }.into(), corrupted),
                        Event::Stream { to, bytes } => {
                            self.deliver(to, Input::Stream { bytes }.into(), false)
                        }
                        Event::StreamClosed { to } => {
                            self.deliver(to, Input::StreamClosed.into(), false)
                        }
                        Event::Join { to, bytes } => {
                            self.deliver(to, SimInput::JoinStream(bytes), false)
                        }
                        Event::Launch {
                            parent,
                            namespace,
                            count,
                            env,
                        } => {
                            if self.roots[parent].alive && self.roots[parent].kills.is_empty() {
                                self.launch(parent, namespace, count, env)
                            }
                        }
                    }
                }
                (Some(_), None) => unreachable!(),
            }
        }
    }

    /// Every process of the group holding `root` agrees with the remote group: the same
    /// triples, complete endpoint tables equal to the truth. Returns the local handle.
    pub fn assert_group_connected(&self, root: usize, remote_root: usize) -> InterGroup {
        let r = &self.roots[root];
        let rr = &self.roots[remote_root];
        let ig = r
            .handle()
            .unwrap_or_else(|| panic!("{} has no handle: {:?}", r.name, r.failed))
            .clone();
        let rig = rr
            .handle()
            .unwrap_or_else(|| panic!("{} has no handle: {:?}", rr.name, rr.failed));
        // SPAWN-4: both sides agree on both triples.
        assert_eq!(ig.remote, rig.local, "remote triple seen by {}", r.name);
        assert_eq!(ig.local, rig.remote, "local triple seen by {}", rr.name);
        assert_eq!(ig.session, rig.session);
        // SPAWN-23: one data-plane key for the inter-group.
        assert_eq!(ig.data_key, rig.data_key, "data key seen by {}", rr.name);
        let g = &self.groups[&r.group_id];
        let rg = &self.groups[&rr.group_id];
        assert_eq!(ig.local, g.header);
        // SPAWN-7: complete tables, exactly the remote group's endpoints.
        assert_eq!(ig.remote_endpoints, rg.endpoints);
        assert_eq!(ig.remote_endpoints.len(), ig.remote.size as usize);
        assert!(
            g.failed.is_empty(),
            "members of {} failed: {:?}",
            r.name,
            g.failed
        );
        assert_eq!(
            g.ready.len(),
            g.members.len(),
            "every member of {} is ready",
            r.name
        );
        for (rank, mig) in &g.ready {
            assert_eq!(mig.local_rank, *rank);
            assert_eq!(
                (mig.local, mig.remote, mig.session, mig.data_key),
                (ig.local, ig.remote, ig.session, ig.data_key)
            );
            assert_eq!(mig.remote_endpoints, rg.endpoints);
        }
        ig
    }

    /// The root and every member of its group ended failed, with no handle.
    pub fn assert_group_failed(&self, root: usize) -> SpawnError {
        let r = &self.roots[root];
        assert!(r.handle().is_none(), "{} still holds a handle", r.name);
        let e = r
            .failed
            .first()
            .unwrap_or_else(|| panic!("{} was told nothing", r.name))
            .clone();
        let hs = r.m.handshake().expect("handshake exists");
        assert!(hs.intergroup().is_none());
        let g = &self.groups[&r.group_id];
        if g.alive {
            assert!(g.ready.is_empty(), "members of {} hold handles", r.name);
            assert_eq!(
                g.failed.len(),
                g.members.len(),
                "every member of {} was told",
                r.name
            );
        }
        e
    }

    /// The children root spawned by parent root `parent`, if launched.
    pub fn child_of(&self, parent: usize) -> Option<usize> {
        let want = format!("child-root-of-{}", self.roots[parent].name);
        let pg = self.roots[parent].group_id;
        self.roots
            .iter()
            .position(|r| r.name == want && r.group_id == 10_000 + pg)
    }
}
