//! More senders than an inbox's own slot table holds (spec `DATA-10`): the senders
//! past it add extensions, and every one of them talks both ways at the same time.

use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use super::*;

const T: Duration = Duration::from_secs(120);

/// A header with source `src`, tag `tag`.
fn hdr(src: u64, tag: u64) -> crate::MsgHeader {
    crate::MsgHeader {
        source: src,
        tag,
        context_id: 0,
        len: 0,
    }
}

fn addrs(d: &ShmDevice) -> PeerAddrs {
    let mut a = PeerAddrs::default();
    d.local_address(&mut a);
    a
}

/// 200 senders, each with its own device in its own thread, connect to one receiver
/// and hold their connections until all are connected, so at least 200 slots of the
/// receiver's inbox are in use at once (6 times the default table of 32; more than
/// the 64 of the fixed table this replaced, which failed here with `NoFreeSlot`). Each
/// sends two messages and gets a reply naming it over the connection the receiver
/// opened back. Then all go away, and a second round of 200 reuses the recycled slots
/// without a further extension.
#[test]
fn two_hundred_senders_to_one_inbox() {
    const SENDERS: usize = 200;
    let mut root = ShmDevice::new(ShmConfig::default()).unwrap();
    let to_root = addrs(&root);
    for round in 0..2 {
        let all_connected = Arc::new(Barrier::new(SENDERS + 1));
        // Connect failures, reported by the receiver (a sender that panicked before
        // the barrier would leave everyone else waiting there).
        let refused = Arc::new(Mutex::new(Vec::new()));
        let senders: Vec<_> = (0..SENDERS)
            .map(|i| {
                let (to_root, all_connected) = (to_root.clone(), all_connected.clone());
                let refused = refused.clone();
                std::thread::spawn(move || {
                    let mut d = ShmDevice::new(ShmConfig::default()).unwrap();
                    let c = d.connect(&to_root);
                    if let Err(e) = &c {
                        refused.lock().unwrap().push(format!("sender {i}: {e}"));
                    }
                    all_connected.wait();
                    let Ok(c) = c else { return };
                    for tag in [1, 2] {
                        d.send(c, hdr(i as u64, tag), format!("{i}.{tag}").as_bytes(), T)
                            .unwrap_or_else(|e| panic!("sender {i}: send: {e}"));
                    }
                    let back = d.recv(RecvSpec::default(), vec![0; 16], T).unwrap();
                    assert_eq!(back.data, format!("ok {i}").as_bytes());
                })
            })
            .collect();
        // Every sender holds a slot before anyone sends.
        all_connected.wait();
        {
            let refused = std::mem::take(&mut *refused.lock().unwrap());
            assert!(
                refused.is_empty(),
                "round {round}: {} of {SENDERS} senders could not connect, first: {}",
                refused.len(),
                refused[0]
            );
        }
        let mut got = vec![0u32; SENDERS];
        for _ in 0..2 * SENDERS {
            let m = root
                .recv(RecvSpec::default(), vec![0; 16], T)
                .unwrap_or_else(|e| panic!("round {round}: receive: {e}"));
            let i = m.header.source as usize;
            assert_eq!(m.data, format!("{i}.{}", m.header.tag).as_bytes());
            got[i] += 1;
            if got[i] == 2 {
                root.send(m.conn, hdr(0, 9), format!("ok {i}").as_bytes(), T)
                    .unwrap();
            }
        }
        assert!(got.iter().all(|&n| n == 2), "every message once");
        for s in senders {
            s.join().unwrap();
        }
        let inbox = root.inbox.as_ref().unwrap();
        assert!(inbox.nslots() >= SENDERS, "round {round}: extended");
        // Round 2 fits into the slots round 1 left behind (recycled as the senders
        // closed), so the table stays as round 1 made it.
        let exts = inbox.nslots();
        if round == 0 {
            assert_eq!(exts, 32 + 3 * 64, "the fewest extensions that hold 200");
        } else {
            assert_eq!(exts, 32 + 3 * 64, "no extension more in round 2");
        }
        // Let the receiver see the closes (it recycles as it goes).
        while !root.conns.is_empty() {
            root.wait_activity(Duration::from_millis(20)).unwrap();
            root.progress().unwrap();
        }
    }
}
