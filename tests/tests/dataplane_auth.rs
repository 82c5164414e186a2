//! The TCP data plane against another local user (`spec/dataplane.md`, DATA-1..DATA-3):
//! while a job's processes talk over TCP, a process running as `nobody` finds their
//! listening ports in `/proc/net/tcp`, connects to every one of them and sends forged
//! HELLOs claiming each member's address (in the old address-only form and in the
//! handshake's form with a key it does not have), data frames and garbage, and keeps
//! the connections open. The job must still succeed, its processes talking to each
//! other over TCP, and the stranger must hear nothing back.
//!
//! Needs root (to become `nobody`); prints `skipped: <reason>` otherwise.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use dynres_tests::job::{NOBODY, Running, Runtime, as_nobody, dynres_bin, runtime_of};
use dynres_transports::MsgHeader;
use dynres_transports::tcp::framing::{FrameKind, encode_frame as frame};
use dynres_transports::tcp::{KeyId, auth};

/// Set (to the targets, `ip:port,…`) in the stranger's environment: the `stranger`
/// test then plays it.
const TARGETS: &str = "DYNRES_TEST_STRANGER_TARGETS";
/// How long the stranger keeps its connections open.
const LINGER: Duration = Duration::from_secs(4);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The pids whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines()
                    .any(|l| l.strip_prefix("PPid:").map(str::trim) == Some(&parent.to_string()))
            })
        })
        .collect()
}

/// The socket inodes process `pid` holds.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let link = std::fs::read_link(e.path()).ok()?;
            let s = link.to_str()?;
            s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Listening IPv4 TCP sockets, by inode (`/proc/net/tcp`: state `0A`).
fn listening() -> HashMap<u64, SocketAddr> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(3) != Some(&"0A") {
                return None;
            }
            let (ip, port) = f.get(1)?.split_once(':')?;
            // The address is the kernel's u32 printed in hex: little-endian bytes.
            let ip = Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_le_bytes());
            let port = u16::from_str_radix(port, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            Some((inode, SocketAddr::V4(SocketAddrV4::new(ip, port))))
        })
        .collect()
}

/// The TCP ports the job's processes (the children of `job`) listen on.
fn job_ports(job: u32) -> Vec<SocketAddr> {
    let table = listening();
    let mut out: Vec<SocketAddr> = children(job)
        .into_iter()
        .flat_map(socket_inodes)
        .filter_map(|i| table.get(&i).copied())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The stranger's side (run as `nobody` by [`a_job_survives_a_local_stranger`]).
#[test]
fn stranger() {
    let Ok(targets) = std::env::var(TARGETS) else {
        return;
    };
    let targets: Vec<SocketAddr> = targets.split(',').map(|t| t.parse().unwrap()).collect();
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let data = |tag| {
        frame(
            FrameKind::Data,
            MsgHeader {
                source: 0,
                tag,
                context_id: 0,
                len: 0,
            },
            &[0xee],
        )
    };
    let mut open = Vec::new();
    for &to in &targets {
        for &claim in &targets {
            let old_hello = frame(
                FrameKind::Hello,
                MsgHeader::default(),
                claim.to_string().as_bytes(),
            );
            let new_hello = frame(
                FrameKind::Hello,
                MsgHeader::default(),
                &auth::encode_hello(KeyId([0x5a; 8]), &[0x17; auth::NONCE_LEN], claim),
            );
            let flood: Vec<u8> = (0..64u64)
                .flat_map(|t| {
                    frame(
                        FrameKind::Data,
                        MsgHeader {
                            tag: t,
                            ..MsgHeader::default()
                        },
                        &[0xab; 4096],
                    )
                })
                .collect();
            for bytes in [
                [old_hello.clone(), data(1)].concat(),
                [new_hello, data(2)].concat(),
                [old_hello, flood].concat(),
                b"DYNR garbage".to_vec(),
            ] {
                let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(2)) else {
                    continue;
                };
                // The rank may close on us half-way: what got through is what counts.
                let _ = s.write_all(&bytes);
                open.push(s);
            }
        }
    }
    std::thread::sleep(LINGER);
    // What the ranks said back. A rank that believed a HELLO would have answered it
    // (before the handshake it sent its own HELLO, its address); one that refuses says
    // nothing and closes.
    let mut back = 0;
    for s in &mut open {
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            back += n;
        }
    }
    println!(
        "stranger: uid {uid}, {} connections to {} ports, {back} bytes back",
        open.len(),
        targets.len()
    );
}

/// DATA-1, DATA-2, DATA-3: a job of three processes on three "nodes" (so they talk
/// over TCP) runs `check` while another user's process attacks the listening ports of
/// its first two processes (the third starts late, so the attack lands before they
/// connect to each other). The job succeeds over TCP, and no process says a word to
/// the stranger.
#[test]
fn a_job_survives_a_local_stranger() {
    if !is_root() {
        dynres_tests::skip("not root, so no second local user to play the stranger");
        return;
    }
    let rt = Runtime::new("dpauth");
    // Rank 2 starts 2 s late: ranks 0 and 1 listen meanwhile, waiting for it to make
    // their communicator.
    let script = "node=$DYNRES_RANK; [ \"$node\" = 2 ] && sleep 2; \
                  DYNRES_HOST_ID=node$node DYNRES_NODE_ADDR=127.0.0.$((node + 1)) \
                  exec \"$0\" example check";
    let bin = dynres_bin().display().to_string();
    let job = Running::start(rt.command(&[
        "run", "-n", "3", "--slots", "3", "--", "sh", "-c", script, &bin,
    ]));
    let deadline = Instant::now() + Duration::from_secs(20);
    let targets = loop {
        // The ranks are the children of the runtime, which `dynres run` supervises
        // (RT-4).
        let ports = job_ports(runtime_of(job.id()));
        if ports.len() >= 2 {
            break ports;
        }
        assert!(Instant::now() < deadline, "the job's ports never showed");
        std::thread::sleep(Duration::from_millis(20));
    };
    let list: Vec<String> = targets.iter().map(SocketAddr::to_string).collect();
    let mut stranger = Command::new(std::env::current_exe().unwrap());
    stranger
        .args(["stranger", "--exact", "--nocapture", "--test-threads=1"])
        .env(TARGETS, list.join(","));
    let stranger = as_nobody(&mut stranger).output().expect("run the stranger");
    let said = String::from_utf8_lossy(&stranger.stdout);
    let report = said
        .lines()
        .find_map(|l| l.split_once("stranger: ").map(|(_, r)| r));
    println!(
        "targets {list:?}: {}",
        report.unwrap_or("the stranger said nothing")
    );
    assert!(stranger.status.success(), "stranger failed:\n{said}");
    let line = format!("stranger: uid {NOBODY}, ");
    assert!(
        said.contains(&line) && !said.contains(", 0 connections"),
        "the stranger did not run as {NOBODY} or reached nobody:\n{said}"
    );
    assert!(
        said.contains(", 0 bytes back"),
        "a rank answered the stranger:\n{said}"
    );
    let f = job.finish(rt.dir.clone(), Duration::from_secs(120));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for line in [
        "[rank 0] check: devices from 0: 1=tcp 2=tcp\n",
        "[rank 0] check: 3 processes ok\n",
    ] {
        assert!(f.stdout.contains(line), "no {line:?} in\n{}", f.dump());
    }
    f.assert_nothing_left();
}
