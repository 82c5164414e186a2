//! A stranger to a job, for tests of the master's acceptor (`spec/runtime.md`, AUTH-6,
//! AUTH-7): `stranger ADDR` holds [`LORISES`] connections to the master's daemon port
//! that each send one byte every 2 s (a connection closed on it is opened again), and
//! on another thread opens connections as fast as it can, keeping the newest
//! [`FLOOD`] open (more than the master's table holds), until it is killed. It holds
//! no key and prints `ready` once its connections are open.

use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// Connections kept open, trickling: more than the old acceptor's 16 threads.
const LORISES: usize = 40;
/// Flood connections kept open: more than the master's table of 64.
const FLOOD: usize = 200;

fn main() {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!("usage: stranger ADDR");
        std::process::exit(2);
    };
    let flood = addr.clone();
    std::thread::spawn(move || {
        let mut open = VecDeque::with_capacity(FLOOD + 1);
        loop {
            if let Ok(s) = TcpStream::connect(&flood) {
                open.push_back(s);
            }
            if open.len() > FLOOD {
                open.pop_front();
            }
        }
    });
    let mut held: Vec<Option<TcpStream>> = (0..LORISES).map(|_| None).collect();
    let mut ready = false;
    loop {
        for slot in &mut held {
            // A byte a time: never a whole hello within any per-read timeout.
            let alive = slot.as_mut().is_some_and(|s| s.write_all(b"D").is_ok());
            if !alive {
                *slot = TcpStream::connect(&addr).ok();
            }
        }
        if !ready {
            ready = true;
            println!("ready");
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}
