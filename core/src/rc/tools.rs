//! Tool requests (`dynres grow/shrink/replace`, `spec/runtime.md` TOOL-1..3) as a
//! sans-I/O machine in the kernel's shape: which answer each tool gets, and when.
//!
//! The master decides a change; a tool that asked for it must learn the outcome of
//! exactly its own request, once. The driver hands each tool request to the master
//! under a ticket and reports here what the master said about that ticket (started,
//! refused) and about the change it started (aborted and why, each status). The
//! machine answers: a waiting tool at its change's final status, a `nowait` tool at
//! once (announced, or queued behind the change in flight). It never reads a clock and
//! never touches a socket, so the answers are tested in memory and checked by the gate
//! (`TOOL-1 …` properties of every resource-change configuration).
//!
//! Its transitions are recorded for trace conformance (`spec/verification.md` §6; role
//! `tool-desk`, encodings in [`super::trace`]).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::hash::{Hash, Hasher};

use super::trace;
use crate::bugs::{Bug, Bugs};
use crate::pset::PsetName;
use crate::rc::{AbortReason, RcError, RcStatus};
use crate::time::Instant;

/// What happened to a tool request, for [`ToolDesk::handle`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ToolInput {
    /// A tool's request is about to be handed to the master under `ticket`.
    Asked {
        /// The ticket the master will report under.
        ticket: u64,
        /// Answer at the final status (`true`) or as soon as the master handled it.
        wait: bool,
    },
    /// The master handled the request of `ticket` (right after `RequestChange`): if it
    /// neither started nor refused it, it is queued (`RC-15`).
    Handled {
        /// The ticket.
        ticket: u64,
    },
    /// The master started `ticket`'s change (`Started`).
    Started {
        /// The ticket.
        ticket: u64,
        /// The change's delta pset.
        delta: PsetName,
    },
    /// The master refused `ticket`'s request, at once or when it left the queue.
    Refused {
        /// The ticket.
        ticket: u64,
        /// Why.
        error: RcError,
    },
    /// The master aborted `delta` (its `Aborted` output, just before the status).
    Aborted {
        /// The change.
        delta: PsetName,
        /// Why.
        reason: AbortReason,
    },
    /// A change reached `status`.
    Status {
        /// The change.
        delta: PsetName,
        /// Its status.
        status: RcStatus,
    },
}

/// The answer a tool gets (TOOL-2); the driver writes it as one line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ToolAnswer {
    /// `nowait`: the change started.
    Announced(PsetName),
    /// `nowait`: the request waits behind the application's change in flight.
    Queued,
    /// The change was finalized.
    Finalized(PsetName),
    /// The change was aborted, and why if the master said.
    Aborted {
        /// The change.
        delta: PsetName,
        /// Why.
        reason: Option<AbortReason>,
    },
    /// The request waited for nodes and did not get them: it counts as aborted
    /// (`RC-21`).
    NotGranted(RcError),
    /// The master refused the request.
    Refused(RcError),
}

/// Something the driver must do: send `answer` to the tool of `ticket`, which is then
/// done.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ToolOutput {
    /// The ticket.
    pub ticket: u64,
    /// Its answer.
    pub answer: ToolAnswer,
}

/// An input [`ToolDesk::handle`] refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ToolError {
    /// A ticket was asked twice: the driver must draw a fresh one per request, or two
    /// tools would share one answer (TOOL-1).
    #[error("ticket {0} is open already")]
    TicketTaken(u64),
}

/// One open request: whether its tool waits, and the change it started, once it did.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Open {
    wait: bool,
    delta: Option<PsetName>,
}

/// The master's tool requests not yet answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ToolDesk {
    bugs: Bugs,
    open: BTreeMap<u64, Open>,
    /// Why a change was aborted, from the `Aborted` just before its final status, until
    /// that status (TOOL-3: dropped then, answered or not).
    why: BTreeMap<PsetName, AbortReason>,
    out: VecDeque<ToolOutput>,
}

// By hand so that a default desk (the runtime's) records its start like any other.
impl Default for ToolDesk {
    fn default() -> Self {
        ToolDesk::new()
    }
}

impl ToolDesk {
    /// A desk with no open request.
    pub fn new() -> Self {
        Self::with_bugs(Bugs::NONE)
    }

    /// A desk with planted bugs (verification only).
    pub fn with_bugs(bugs: Bugs) -> Self {
        let mut m = ToolDesk {
            bugs,
            open: BTreeMap::new(),
            why: BTreeMap::new(),
            out: VecDeque::new(),
        };
        let start = crate::trace::enabled().then(trace::encode_tool_desk_start);
        crate::trace::record_start(&mut m, start);
        m
    }

    /// Requests not answered yet.
    pub fn open(&self) -> usize {
        self.open.len()
    }

    /// Abort reasons kept for a status still to come.
    pub fn reasons_kept(&self) -> usize {
        self.why.len()
    }

    /// Feeds one input. The time is not used: no answer waits for a clock, only for
    /// the master (its change deadline is `RC-10`'s). A refused input changes nothing.
    pub fn handle(&mut self, now: Instant, input: ToolInput) -> Result<(), ToolError> {
        crate::trace::record(self, now, input, Self::step)
    }

    /// [`ToolDesk::handle`] without its transition event.
    fn step(&mut self, _now: Instant, input: ToolInput) -> Result<(), ToolError> {
        match input {
            ToolInput::Asked { ticket, wait } => {
                if self.open.contains_key(&ticket) {
                    return Err(ToolError::TicketTaken(ticket));
                }
                self.open.insert(ticket, Open { wait, delta: None });
            }
            ToolInput::Handled { ticket } => {
                let queued = self
                    .open
                    .get(&ticket)
                    .is_some_and(|o| !o.wait && o.delta.is_none());
                if queued && !self.bugs.has(Bug::ToolQueuedUnanswered) {
                    self.answer(ticket, ToolAnswer::Queued);
                }
            }
            ToolInput::Started { ticket, delta } => match self.open.get_mut(&ticket) {
                Some(o) if o.wait => o.delta = Some(delta),
                Some(_) => self.answer(ticket, ToolAnswer::Announced(delta)),
                None => {}
            },
            ToolInput::Refused { ticket, error } => {
                if self.open.contains_key(&ticket) {
                    let answer = match error {
                        RcError::NotGranted { .. } => ToolAnswer::NotGranted(error),
                        _ => ToolAnswer::Refused(error),
                    };
                    self.answer(ticket, answer);
                }
            }
            ToolInput::Aborted { delta, reason } => {
                self.why.insert(delta, reason);
            }
            ToolInput::Status { delta, status } => self.on_status(delta, status),
        }
        Ok(())
    }

    /// TOOL-2: a waiting tool hears its change's final status, not an intermediate one.
    fn on_status(&mut self, delta: PsetName, status: RcStatus) {
        if !status.is_final() && !self.bugs.has(Bug::ToolAnswerBeforeFinal) {
            return;
        }
        let reason = self.why.remove(&delta);
        let done: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, o)| o.delta.as_ref() == Some(&delta))
            .map(|(t, _)| *t)
            .collect();
        for ticket in done {
            let answer = match status {
                RcStatus::Aborted => ToolAnswer::Aborted {
                    delta: delta.clone(),
                    reason,
                },
                _ => ToolAnswer::Finalized(delta.clone()),
            };
            self.answer(ticket, answer);
        }
    }

    /// TOOL-1: a ticket is answered once, then forgotten.
    fn answer(&mut self, ticket: u64, answer: ToolAnswer) {
        if self.open.remove(&ticket).is_some() {
            self.out.push_back(ToolOutput { ticket, answer });
        }
    }

    /// The next answer to send, if any.
    pub fn poll_output(&mut self) -> Option<ToolOutput> {
        self.out.pop_front()
    }

    /// Always `None`: the desk arms no timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// The fingerprint of the state without the answers not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }
}

crate::machine::by_inherent_methods!(ToolDesk, ToolInput, ToolOutput, ToolError);

impl crate::trace::Recorded for ToolDesk {
    const ROLE: &'static str = trace::ROLE_TOOL_DESK;
    // The runtime acts on a refusal (a ticket drawn twice gets no reply socket), so
    // replay checks which inputs were refused too, as the liveness detector's.
    const RESULT: crate::trace::ResultRecord = crate::trace::ResultRecord::Hashed;
    fn key(&self) -> crate::trace::TraceKey {
        // One desk per master process, as its liveness detector.
        crate::trace::TraceKey::None
    }
    fn queue(&mut self) -> &mut VecDeque<ToolOutput> {
        &mut self.out
    }
    fn encode_input(input: &ToolInput) -> Vec<u8> {
        trace::encode_tool_input(input)
    }
    // A refusal's error is recorded in its wire form (`trace::error_as_recorded`), so
    // an answer holding one is hashed with the error in that form: the answer replay
    // gives for the recorded input.
    fn hash_output<H: Hasher>(output: &ToolOutput, h: &mut H) {
        let recorded = |error: &RcError| trace::error_as_recorded(error);
        let answer = match &output.answer {
            ToolAnswer::Refused(e) => ToolAnswer::Refused(recorded(e)),
            ToolAnswer::NotGranted(e) => ToolAnswer::NotGranted(recorded(e)),
            _ => return output.hash(h),
        };
        ToolOutput {
            ticket: output.ticket,
            answer,
        }
        .hash(h);
    }
}

#[cfg(test)]
mod tests;
