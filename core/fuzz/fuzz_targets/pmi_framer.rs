//! PMI-1 command streams (`spec/pmi.md`, PMIS-1): the framer and parsers never panic,
//! hold no more than one command's limit, and a session fed the same bytes answers
//! without panicking either.
#![no_main]
use dynres_core::pmi::wire::{Framer, MAX_MCMD};
use dynres_core::pmi::{PmiInput, PmiJob, PmiSession};
use dynres_core::pset::PsetName;
use dynres_core::{Duration, Instant, Namespace, ProcessId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut f = Framer::new();
    for chunk in data.chunks(61) {
        f.push(chunk);
        while let Some(r) = f.next_command() {
            if r.is_err() {
                break;
            }
        }
        assert!(f.held() <= MAX_MCMD + 61);
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
    s.handle(Instant(0), PmiInput::Received(data.to_vec()));
    while s.poll_output().is_some() {}
});
