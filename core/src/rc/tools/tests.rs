use super::*;
use crate::machine::Machine;

fn delta(n: u32) -> PsetName {
    PsetName::parse(&alloc::format!("mpi://rte/app/rc/{n}")).unwrap()
}

fn feed(d: &mut ToolDesk, inputs: impl IntoIterator<Item = ToolInput>) -> Vec<ToolOutput> {
    for i in inputs {
        d.handle(Instant::ZERO, i).unwrap();
    }
    d.take_outputs()
}

fn answered(ticket: u64, answer: ToolAnswer) -> ToolOutput {
    ToolOutput { ticket, answer }
}

/// TOOL-2: a waiting tool hears nothing until its change is final, then the outcome.
#[test]
fn a_waiting_tool_hears_the_final_status_of_its_own_change() {
    let mut d = ToolDesk::new();
    let out = feed(
        &mut d,
        [
            ToolInput::Asked {
                ticket: 1,
                wait: true,
            },
            ToolInput::Started {
                ticket: 1,
                delta: delta(4),
            },
            ToolInput::Handled { ticket: 1 },
            ToolInput::Status {
                delta: delta(4),
                status: RcStatus::Announced,
            },
            ToolInput::Status {
                delta: delta(4),
                status: RcStatus::Pending,
            },
            // Another change's final status is not this tool's.
            ToolInput::Status {
                delta: delta(9),
                status: RcStatus::Finalized,
            },
        ],
    );
    assert!(out.is_empty(), "answered before the decision: {out:?}");
    let out = feed(
        &mut d,
        [ToolInput::Status {
            delta: delta(4),
            status: RcStatus::Finalized,
        }],
    );
    assert_eq!(out, [answered(1, ToolAnswer::Finalized(delta(4)))]);
    assert_eq!(d.open(), 0, "TOOL-1: answered once, then forgotten");
    let again = feed(
        &mut d,
        [ToolInput::Status {
            delta: delta(4),
            status: RcStatus::Finalized,
        }],
    );
    assert!(again.is_empty(), "TOOL-1: never a second answer");
}

/// RC-12, TOOL-2: an abort is told with the reason the master gave just before it.
#[test]
fn an_aborted_change_is_told_with_its_reason_and_the_reason_is_dropped() {
    let mut d = ToolDesk::new();
    let out = feed(
        &mut d,
        [
            ToolInput::Asked {
                ticket: 7,
                wait: true,
            },
            ToolInput::Started {
                ticket: 7,
                delta: delta(5),
            },
            ToolInput::Aborted {
                delta: delta(5),
                reason: AbortReason::NotDecidedInTime,
            },
            ToolInput::Status {
                delta: delta(5),
                status: RcStatus::Aborted,
            },
        ],
    );
    assert_eq!(
        out,
        [answered(
            7,
            ToolAnswer::Aborted {
                delta: delta(5),
                reason: Some(AbortReason::NotDecidedInTime)
            }
        )]
    );
    assert_eq!(
        d.reasons_kept(),
        0,
        "TOOL-3: the reason goes with the status"
    );
    // An abort nobody waits for leaves nothing behind either.
    feed(
        &mut d,
        [
            ToolInput::Aborted {
                delta: delta(6),
                reason: AbortReason::MemberLost,
            },
            ToolInput::Status {
                delta: delta(6),
                status: RcStatus::Aborted,
            },
        ],
    );
    assert_eq!(d.reasons_kept(), 0);
}

/// TOOL-2: a `nowait` tool hears at once: announced if its change started, queued if
/// the master neither started nor refused it.
#[test]
fn a_nowait_tool_hears_announced_or_queued_at_once() {
    let mut d = ToolDesk::new();
    let out = feed(
        &mut d,
        [
            ToolInput::Asked {
                ticket: 1,
                wait: false,
            },
            ToolInput::Started {
                ticket: 1,
                delta: delta(4),
            },
            ToolInput::Handled { ticket: 1 },
            ToolInput::Asked {
                ticket: 2,
                wait: false,
            },
            ToolInput::Handled { ticket: 2 },
        ],
    );
    assert_eq!(
        out,
        [
            answered(1, ToolAnswer::Announced(delta(4))),
            answered(2, ToolAnswer::Queued)
        ]
    );
    // When the queued request starts later, nobody is left to tell.
    let later = feed(
        &mut d,
        [
            ToolInput::Started {
                ticket: 2,
                delta: delta(5),
            },
            ToolInput::Status {
                delta: delta(5),
                status: RcStatus::Finalized,
            },
        ],
    );
    assert!(later.is_empty(), "{later:?}");
}

/// RC-21: a request that waited for nodes and did not get them is told apart from a
/// plain refusal; a refusal for a ticket answered already is not told again.
#[test]
fn refusals_and_not_granted_requests() {
    let mut d = ToolDesk::new();
    let out = feed(
        &mut d,
        [
            ToolInput::Asked {
                ticket: 1,
                wait: true,
            },
            ToolInput::Asked {
                ticket: 2,
                wait: true,
            },
            ToolInput::Refused {
                ticket: 1,
                error: RcError::Timeout,
            },
            ToolInput::Refused {
                ticket: 2,
                error: RcError::NotGranted { slots: 2 },
            },
            ToolInput::Refused {
                ticket: 1,
                error: RcError::Timeout,
            },
        ],
    );
    assert_eq!(
        out,
        [
            answered(1, ToolAnswer::Refused(RcError::Timeout)),
            answered(2, ToolAnswer::NotGranted(RcError::NotGranted { slots: 2 })),
        ]
    );
    assert_eq!(d.open(), 0, "TOOL-3: nothing is kept past the answer");
}

/// TOOL-1: a ticket open twice would make two tools share one answer.
#[test]
fn a_ticket_is_open_once() {
    let mut d = ToolDesk::new();
    let ask = ToolInput::Asked {
        ticket: 3,
        wait: true,
    };
    d.handle(Instant::ZERO, ask.clone()).unwrap();
    let before = d.fingerprint();
    assert_eq!(d.handle(Instant::ZERO, ask), Err(ToolError::TicketTaken(3)));
    assert_eq!(d.fingerprint(), before, "a refused input changes nothing");
    assert_eq!(d.poll_timeout(), None);
}
