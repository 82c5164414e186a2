//! Port-name parser (nom over text): never panics; parsed names print back parseable.
#![no_main]
use dynres_core::spawn::PortName;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = core::str::from_utf8(data) {
        if let Ok(p) = PortName::parse(s) {
            assert_eq!(PortName::parse(&p.to_string()), Ok(p));
        }
    }
});
