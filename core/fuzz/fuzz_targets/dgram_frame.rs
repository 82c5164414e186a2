//! Datagram segment / ack parser (checksum first, then the tag): never panics; what
//! decodes keeps its length and opens again once sealed (SPAWN-12, SPAWN-22).
#![no_main]
use dynres_core::spawn::datagram::DgramFrame;
use dynres_core::spawn::{BootKey, Role};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = BootKey([0x5a; 32]);
    // Only a frame sealed under the key opens; arbitrary bytes never panic.
    let _ = DgramFrame::open(data, &key, Role::Initiator);
    if let Ok(f) = DgramFrame::decode(data) {
        let sealed = f.encode(&key, Role::Initiator);
        assert_eq!(sealed.len(), data.len());
        assert_eq!(DgramFrame::open(&sealed, &key, Role::Initiator), Ok(f));
    }
});
