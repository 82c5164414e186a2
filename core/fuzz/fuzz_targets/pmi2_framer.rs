//! PMI-2 message streams (`spec/pmi.md`, PMIS-1, PMIS-17): the framer and parser never
//! panic, hold no more than one message's limit, and a session switched to PMI-2 and fed
//! the same bytes answers without panicking either.
#![no_main]
use dynres_core::Instant;
use dynres_core::pmi::PmiInput;
use dynres_core::pmi::wire::PmiWireError;
use dynres_core::pmi::wire2::{Framer2, LEN_FIELD, MAX_MESSAGE};
use libfuzzer_sys::fuzz_target;

#[path = "../common/pmi.rs"]
mod pmi;

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
    let mut s = pmi::session();
    let init = b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec();
    s.handle(Instant(0), PmiInput::Received(init));
    s.handle(Instant(0), PmiInput::Received(data.to_vec()));
    while s.poll_output().is_some() {}
});
