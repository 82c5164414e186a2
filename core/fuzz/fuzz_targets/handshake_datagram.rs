//! A listening acceptor and a connecting initiator fed arbitrary datagrams: never panic,
//! and a rejected datagram leaves the machine unchanged but for the count of forged ones
//! (spec/spawn.md SPAWN-10, SPAWN-22).
#![no_main]
use dynres_core::spawn::{Addr, GroupHeader, Handshake, HandshakeConfig, Input, PortName};
use dynres_core::Instant;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let port = PortName::parse("dynres:2:hybrid-4:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a").expect("valid");
    let h = GroupHeader { group_id: 7, size: 2, context_id: 1 };
    let cfg = HandshakeConfig::new(h, vec![Addr(vec![1]), Addr(vec![2])]);
    let mut acc = Handshake::accept(Instant(0), port.clone(), cfg.clone()).expect("valid");
    let mut ini = Handshake::connect(Instant(0), port, cfg).expect("valid");
    for (i, d) in data.split(|b| *b == 0xA5).enumerate() {
        for hs in [&mut acc, &mut ini] {
            let before = hs.clone();
            let input = Input::Datagram { from: Addr(vec![0xd0]), bytes: d.to_vec() };
            if hs.handle(Instant(i as u64), input).is_err() {
                assert!(hs.eq_except_forged(&before));
            }
        }
    }
});
