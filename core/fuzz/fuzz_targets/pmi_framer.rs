//! PMI-1 command streams (`spec/pmi.md`, PMIS-1): the framer and parsers never panic,
//! hold no more than one command's limit, and a session fed the same bytes answers
//! without panicking either.
#![no_main]
use dynres_core::Instant;
use dynres_core::pmi::PmiInput;
use dynres_core::pmi::wire::{Framer, MAX_MCMD};
use libfuzzer_sys::fuzz_target;

#[path = "../common/pmi.rs"]
mod pmi;

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
    let mut s = pmi::session();
    s.handle(Instant(0), PmiInput::Received(data.to_vec()));
    while s.poll_output().is_some() {}
});
