//! Tool commands on `cli.sock` (`dynres grow/shrink/replace/status`): parsing, and the
//! answers that wait for the decision of the change a command started.
//!
//! Lines: `status` (`status json`: the same as one JSON object), `grow K`, `shrink K`, `replace R A`, each change optionally followed
//! by `nowait`; and `data HEX`, a guest job's data-server request (`spec/runtime.md`
//! NAMES-2: an rc client frame, hex-encoded, answered `ok HEX` with the reply frame). Counts are plain decimal digits: a sign is the CLI's business, so
//! `grow -3` is refused instead of being read as `+3`. Answers are one line, `ok …` or
//! `error: …` (`status` answers `ok` and the table).
//!
//! The master names each tool request by a ticket and reports under it when the change
//! starts or is refused — at once, or later when it leaves the queue (`RC-15`) — so a
//! tool learns the final outcome of exactly its own request. Which answer and when is
//! core's [`ToolDesk`] (`spec/runtime.md` TOOL-1..3); this module only parses lines and
//! writes answers.

use super::ioloop::ToolReply;
use std::collections::BTreeMap;

use dynres_core::pset::PsetName;
use dynres_core::rc::tools::{ToolAnswer, ToolDesk, ToolInput, ToolOutput};
use dynres_core::rc::{AbortReason, ChangeRequest, RcError, RcStatus};

/// A parsed tool command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `status`, or `status json`.
    Status {
        /// The answer is one JSON object instead of the table.
        json: bool,
    },
    /// A guest job's publish, lookup or unpublish (NAMES-2): the request's client
    /// frame, not yet decoded.
    Data {
        /// The frame.
        frame: Vec<u8>,
    },
    /// A change request; `wait`: answer once it is decided (the default).
    Change {
        /// The request.
        req: ChangeRequest,
        /// Whether the answer waits for the decision.
        wait: bool,
    },
}

/// Parses a command line for application `app`.
pub fn parse(line: &str, app: &str) -> Result<Command, String> {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if let ["data", frame] = words.as_slice() {
        let frame = dynres_core::trace::unhex(frame).ok_or("bad data frame: not hex")?;
        return Ok(Command::Data { frame });
    }
    let wait = match words.last() {
        Some(&"nowait") => {
            words.pop();
            false
        }
        _ => true,
    };
    let count = |s: &str| -> Result<u32, String> {
        match s.parse::<u32>() {
            Ok(k) if k > 0 && s.bytes().all(|b| b.is_ascii_digit()) => Ok(k),
            _ => Err(format!(
                "bad count {s:?}: a positive number of processes, without sign"
            )),
        }
    };
    let req = match words.as_slice() {
        ["status"] if wait => return Ok(Command::Status { json: false }),
        ["status", "json"] if wait => return Ok(Command::Status { json: true }),
        ["grow", k] => ChangeRequest::add(app, count(k)?),
        ["shrink", k] => ChangeRequest::sub(app, count(k)?),
        ["replace", r, a] => ChangeRequest::replace(app, count(r)?, count(a)?),
        _ => return Err(format!("bad command {line:?}")),
    };
    Ok(Command::Change { req, wait })
}

/// Tool requests the master has not finished with: core's [`ToolDesk`] decides each
/// answer (TOOL-1..3); this keeps the socket each ticket answers on and writes the
/// answer as one line.
#[derive(Default)]
pub struct ToolRequests {
    next: u64,
    desk: ToolDesk,
    replies: BTreeMap<u64, ToolReply>,
}

impl ToolRequests {
    /// Registers a request about to be handed to the master; returns its ticket.
    pub fn open(&mut self, reply: ToolReply, wait: bool) -> u64 {
        self.next += 1;
        let ticket = self.next;
        // Tickets are drawn here, one per request, so the desk never refuses them.
        if self.feed(ToolInput::Asked { ticket, wait }) {
            self.replies.insert(ticket, reply);
        }
        ticket
    }

    /// The master announced the ticket's change.
    pub fn started(&mut self, ticket: u64, delta: &PsetName) {
        let delta = delta.clone();
        self.feed(ToolInput::Started { ticket, delta });
    }

    /// The master refused the ticket's request (at once or when it left the queue).
    pub fn refused(&mut self, ticket: u64, error: &RcError) {
        let error = error.clone();
        self.feed(ToolInput::Refused { ticket, error });
    }

    /// Right after the master handled the ticket's request.
    pub fn after_request(&mut self, ticket: u64) {
        self.feed(ToolInput::Handled { ticket });
    }

    /// The master aborted `delta` because of `reason` (its status comes next).
    pub fn aborted(&mut self, delta: &PsetName, reason: AbortReason) {
        let delta = delta.clone();
        self.feed(ToolInput::Aborted { delta, reason });
    }

    /// A change reached `status`.
    pub fn status(&mut self, delta: &PsetName, status: RcStatus) {
        let delta = delta.clone();
        self.feed(ToolInput::Status { delta, status });
    }

    /// Feeds the desk and sends the answers it decided; whether it took the input.
    fn feed(&mut self, input: ToolInput) -> bool {
        let now = dynres_core::time::Instant::ZERO;
        let taken = match self.desk.handle(now, input) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "tool request refused by the desk");
                false
            }
        };
        while let Some(ToolOutput { ticket, answer }) = self.desk.poll_output() {
            if let Some(reply) = self.replies.remove(&ticket) {
                reply.send(line(&answer));
            }
        }
        taken
    }
}

/// The line a tool reads for `answer`.
fn line(answer: &ToolAnswer) -> String {
    match answer {
        ToolAnswer::Announced(delta) => format!("ok {delta} ANNOUNCED\n"),
        ToolAnswer::Queued => "ok queued behind the change in flight\n".into(),
        ToolAnswer::Finalized(delta) => format!("ok {delta} FINALIZED\n"),
        ToolAnswer::Aborted {
            delta,
            reason: Some(why),
        } => format!("error: change {delta} was ABORTED: {why}\n"),
        ToolAnswer::Aborted {
            delta,
            reason: None,
        } => {
            format!("error: change {delta} was ABORTED\n")
        }
        ToolAnswer::NotGranted(error) => format!("error: ABORTED: {error}\n"),
        ToolAnswer::Refused(error) => format!("error: refused: {error}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_plain_positive_digits() {
        assert_eq!(
            parse("grow 3", "app"),
            Ok(Command::Change {
                req: ChangeRequest::add("app", 3),
                wait: true
            })
        );
        assert_eq!(
            parse("replace 1 2 nowait", "app"),
            Ok(Command::Change {
                req: ChangeRequest::replace("app", 1, 2),
                wait: false
            })
        );
        for bad in [
            "grow -3",
            "grow +3",
            "grow 0",
            "shrink 4294967296",
            "grow",
            "grow 1 2",
            "status nowait",
            "explode",
        ] {
            assert!(parse(bad, "app").is_err(), "{bad}");
        }
        assert_eq!(
            parse(" status ", "app"),
            Ok(Command::Status { json: false })
        );
        assert_eq!(
            parse("status json", "app"),
            Ok(Command::Status { json: true })
        );
        assert!(parse("status xml", "app").is_err());
    }

    #[test]
    fn a_waiting_tool_hears_the_decision_and_a_queued_nowait_tool_hears_queued() {
        let mut t = ToolRequests::default();
        let d = PsetName::parse("mpi://rte/app/rc/4").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let a = t.open(ToolReply::to(tx.clone()), true);
        t.started(a, &d);
        t.after_request(a);
        assert!(
            rx.try_recv().is_err(),
            "a waiting tool is answered at the decision"
        );
        t.status(&d, RcStatus::Pending);
        assert!(rx.try_recv().is_err());
        t.status(&d, RcStatus::Finalized);
        assert_eq!(rx.try_recv().unwrap(), format!("ok {d} FINALIZED\n"));

        let b = t.open(ToolReply::to(tx.clone()), false);
        t.after_request(b);
        assert!(rx.try_recv().unwrap().contains("queued"));

        let c = t.open(ToolReply::to(tx), true);
        t.after_request(c);
        t.refused(c, &RcError::Timeout);
        assert!(rx.try_recv().unwrap().starts_with("error: refused"));
    }

    /// RC-12: a tool waiting for a change the master aborted hears why.
    #[test]
    fn a_waiting_tool_hears_why_its_change_was_aborted() {
        let mut t = ToolRequests::default();
        let d = PsetName::parse("mpi://rte/app/rc/5").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let a = t.open(ToolReply::to(tx), true);
        t.started(a, &d);
        t.after_request(a);
        t.aborted(&d, AbortReason::NotDecidedInTime);
        t.status(&d, RcStatus::Aborted);
        assert_eq!(
            rx.try_recv().unwrap(),
            format!(
                "error: change {d} was ABORTED: {}\n",
                AbortReason::NotDecidedInTime
            )
        );
        assert!(t.replies.is_empty(), "nothing is kept after the answer");
    }
}
