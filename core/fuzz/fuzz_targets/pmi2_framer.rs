//! PMI-2 message streams (`spec/pmi.md`, PMIS-1, PMIS-17): the framer and parser never
//! panic, hold no more than one message's limit, and a session switched to PMI-2 and fed
//! the same bytes answers without panicking either.
#![no_main]
use dynres_core::pmi::wire::PmiWireError;
use dynres_core::pmi::wire2::{Framer2, LEN_FIELD, MAX_MESSAGE};
use dynres_core::pmi::{PmiInput, PmiJob, PmiSession};
use dynres_core::pset::PsetName;
use dynres_core::{Duration, Instant, Namespace, ProcessId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut f = Framer2::new();
    for chunk in data.chunks(61) {
        f.push(chunk);
        while let Some(r) = f.next_command() {
            if matches!(r, Err(PmiWireError::BadLength | PmiWireError::TooLong(_))) {
                break;
            }
        }
        assert!(f.held() <= LEN_FIELD + MAX_MESSAGE + 61);
    }
    let mut s = PmiSession::new(PmiJob {
        pid: ProcessId::new(Namespace::new("job"), 0),
        rank: 0,
        size: 1,
        appnum: 0,
        universe: 1,
        kvsname: "job".into(),
        mapping: None,
        group: PsetName::world(),
        barrier_timeout: Duration::from_secs(1),
        preput: Vec::new(),
        spawner: None,
    });
    let init = b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec();
    s.handle(Instant(0), PmiInput::Received(init));
    s.handle(Instant(0), PmiInput::Received(data.to_vec()));
    while s.poll_output().is_some() {}
});
