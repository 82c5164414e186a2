//! `MPI_Comm_join(fd)`: two processes that share a byte stream swap their port names
//! over it, then run an ordinary handshake; the lower port accepts (SPAWN-14).

use core::cmp::Ordering;

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::time::Instant;
use crate::wire::WireError;

use super::datagram::DgramFrame;
use super::handshake::Handshake;
use super::msg::JoinPort;
use super::port::PortName;
use super::role::Role;
use super::stream::FrameReader;
use super::trace;
use super::types::{HandshakeConfig, Phase};
use super::{Input, JoinInput, Output, SpawnError};
use crate::trace::InstanceTag;

/// Inputs held while the roles are still undecided, at most this many.
pub const MAX_HELD: usize = 64;

/// One end of a join.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Join {
    my_port: PortName,
    cfg: HandshakeConfig,
    reader: FrameReader,
    deadline: Instant,
    inner: Option<Handshake>,
    held: Vec<Input>,
    failed: Option<SpawnError>,
    out: VecDeque<Output>,
    bugs: crate::bugs::Bugs,
    tag: InstanceTag,
}

impl Join {
    /// Starts a join; `my_port` is a port this process listens on, the local group is
    /// this process alone.
    pub fn new(now: Instant, my_port: PortName, cfg: HandshakeConfig) -> Result<Self, SpawnError> {
        let start = crate::trace::enabled().then(|| trace::encode_join_start(now, &my_port, &cfg));
        let mut j = Self::start(now, my_port, cfg)?;
        crate::trace::record_start(&mut j, start);
        Ok(j)
    }

    /// The machine id of its transition events: its (singleton) group and instance.
    fn trace_id(&self) -> String {
        format!("g{}.{}", self.cfg.local.group_id, self.tag.0)
    }

    /// A fingerprint of the state without the outputs not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }

    fn start(now: Instant, my_port: PortName, cfg: HandshakeConfig) -> Result<Self, SpawnError> {
        if cfg.local.size != 1 {
            return Err(SpawnError::Config("join connects singleton groups"));
        }
        let mut out = VecDeque::new();
        out.push_back(Output::SendJoin {
            bytes: JoinPort {
                port: my_port.to_string(),
            }
            .encode(),
        });
        Ok(Join {
            deadline: now + cfg.timeout,
            my_port,
            cfg,
            reader: FrameReader::new(),
            inner: None,
            held: Vec::new(),
            failed: None,
            out,
            bugs: crate::bugs::Bugs::NONE,
            tag: InstanceTag::default(),
        })
    }

    /// Plants bugs for the verification crate's corpus (also into the handshake, once
    /// the roles are decided).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bugs: crate::bugs::Bugs) {
        self.bugs = bugs;
        if let Some(hs) = self.inner.as_mut() {
            hs.plant(bugs);
        }
    }

    /// Feeds one input (see [`Handshake::handle`]); also takes
    /// [`JoinInput::JoinStream`].
    pub fn handle(&mut self, now: Instant, input: JoinInput) -> Result<(), SpawnError> {
        crate::trace::record(self, now, input, Self::step)
    }

    fn step(&mut self, now: Instant, input: JoinInput) -> Result<(), SpawnError> {
        if self.failed.is_some() {
            return Ok(());
        }
        if let Some(hs) = self.inner.as_mut() {
            let JoinInput::Handshake(input) = input else {
                // The join stream is never used after the port exchange.
                return Ok(());
            };
            let r = hs.step(now, input);
            self.drain();
            return r;
        }
        match input {
            JoinInput::JoinStream { bytes } => self.on_join_bytes(now, &bytes),
            JoinInput::Handshake(Input::Timeout) => {
                if now >= self.deadline {
                    self.fail(SpawnError::Timeout {
                        phase: Phase::JoinExchange,
                    });
                }
                Ok(())
            }
            JoinInput::Handshake(held) => {
                // The peer may already have sent its Hello when its port has not arrived
                // here yet.
                if self.held.len() >= MAX_HELD {
                    return Err(WireError::OverLimit {
                        what: "inputs held before the join port",
                        value: MAX_HELD as u64 + 1,
                        max: MAX_HELD as u64,
                    }
                    .into());
                }
                if let Input::Datagram { bytes, .. } = &held {
                    // Check what can be checked now: corruption is reported at once.
                    DgramFrame::decode(bytes)?;
                }
                self.held.push(held);
                Ok(())
            }
        }
    }

    fn on_join_bytes(&mut self, now: Instant, bytes: &[u8]) -> Result<(), SpawnError> {
        let mut reader = self.reader.clone();
        let frames = reader.push(bytes)?;
        let Some((h, body)) = frames.first() else {
            self.reader = reader;
            return Ok(());
        };
        let peer = JoinPort::decode_body(h.msg_type, body)?;
        let peer = PortName::parse(&peer.port)?;
        self.reader = reader;
        // SPAWN-14: both ends compare the same two strings, so they pick opposite roles,
        // the lower port accepting; equal strings cannot tell the ends apart. (One
        // three-way comparison, so no `<` that might as well be `<=` once equality is
        // ruled out.)
        let order = match self.my_port.to_string().cmp(&peer.to_string()) {
            Ordering::Equal => {
                self.fail(SpawnError::JoinSamePort);
                return Ok(());
            }
            _ if self.bugs.has(crate::bugs::Bug::JoinCompareTags) => {
                self.my_port.tag.cmp(&peer.tag)
            }
            order => order,
        };
        let hs = match order {
            Ordering::Less => {
                Handshake::start(now, Role::Acceptor, self.my_port.clone(), self.cfg.clone())
            }
            _ => Handshake::start(now, Role::Initiator, peer, self.cfg.clone()),
        };
        match hs {
            Ok(hs) => {
                self.inner = Some(hs);
                // The handshake inside takes the join's planted bugs.
                #[cfg(feature = "planted-bugs")]
                self.plant(self.bugs);
                self.drain();
                for input in core::mem::take(&mut self.held) {
                    // Held inputs were not checked yet; bad ones are dropped as usual.
                    let _ = self.step(now, input.into());
                }
            }
            Err(e) => self.fail(e),
        }
        Ok(())
    }

    fn drain(&mut self) {
        if let Some(hs) = self.inner.as_mut() {
            while let Some(o) = hs.poll_output() {
                self.out.push_back(o);
            }
        }
    }

    fn fail(&mut self, e: SpawnError) {
        self.out.push_back(Output::Failed(e.clone()));
        self.failed = Some(e);
    }

    /// The next thing the driver must do.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The port exchange's deadline, then the handshake's.
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (&self.failed, &self.inner) {
            (Some(_), _) => None,
            (None, Some(hs)) => hs.poll_timeout(),
            (None, None) => Some(self.deadline),
        }
    }

    /// The handshake, once the roles are decided.
    pub fn handshake(&self) -> Option<&Handshake> {
        self.inner.as_ref()
    }

    /// Forged messages the handshake dropped so far (SPAWN-22, [`Handshake::forged`]);
    /// 0 before the roles are decided (held inputs are judged once they are).
    pub fn forged(&self) -> u32 {
        self.inner.as_ref().map_or(0, Handshake::forged)
    }

    /// See [`Handshake::eq_except_forged`].
    pub fn eq_except_forged(&self, other: &Join) -> bool {
        let mut c = self.clone();
        c.inner.clone_from(&other.inner);
        let inner = match (&self.inner, &other.inner) {
            (Some(a), Some(b)) => a.eq_except_forged(b),
            (a, b) => a == b,
        };
        c == *other && inner
    }

    /// The error, if the join failed before or during the handshake.
    pub fn error(&self) -> Option<&SpawnError> {
        self.failed
            .as_ref()
            .or_else(|| self.inner.as_ref().and_then(Handshake::error))
    }
}

crate::machine::by_inherent_methods!(Join, JoinInput, Output, SpawnError);

crate::spawn::trace::recorded_by_id!(Join, JoinInput, ROLE_JOIN, encode_join_input);
