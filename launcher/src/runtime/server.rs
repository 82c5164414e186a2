//! The job's sockets: each accepted connection must open with a hello carrying the
//! job's secret (else it is closed and logged); then client connections carry kernel
//! frames and tool connections one command line.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

use dynres_core::rc::wire::decode_client;

use super::engine::Event;
use crate::auth::{HELLO_OK, Peer, read_hello};
use crate::framing::{Frame, FrameReader};

/// Which socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `control.sock`: application processes.
    Control,
    /// `cli.sock`: tools.
    Tool,
}

/// A listening socket served by a thread until [`Server::stop`].
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

impl Server {
    /// Serves `listener` (bound at `path`).
    pub fn start(
        listener: UnixListener,
        path: PathBuf,
        kind: Kind,
        secret: String,
        events: Sender<Event>,
    ) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            for s in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(s) = s else { continue };
                let (secret, events) = (secret.clone(), events.clone());
                std::thread::spawn(move || serve(s, kind, &secret, &events));
            }
        });
        Server {
            path,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops accepting (wakes the accept loop with a connection of its own).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut s: UnixStream, kind: Kind, secret: &str, events: &Sender<Event>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let peer = match read_hello(&mut s, secret) {
        Ok(Some(p)) => p,
        Ok(None) => {
            tracing::warn!(socket = ?kind, "refused a connection: wrong secret or malformed hello");
            return;
        }
        Err(e) => {
            tracing::debug!(socket = ?kind, error = %e, "connection closed before its hello");
            return;
        }
    };
    let _ = s.set_read_timeout(None);
    match (kind, peer) {
        (Kind::Control, Peer::Client(rank)) => client(s, rank, events),
        (Kind::Tool, Peer::Tool) => tool(s, events),
        _ => tracing::warn!(socket = ?kind, "refused a connection: wrong kind of peer"),
    }
}

fn client(s: UnixStream, rank: u32, events: &Sender<Event>) {
    let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let Ok(w) = s.try_clone() else { return };
    if events
        .send(Event::Hello {
            conn,
            rank,
            stream: w,
        })
        .is_err()
    {
        return;
    }
    let mut r = s;
    let mut frames = FrameReader::new();
    loop {
        let frame = match frames.next(&mut r) {
            Ok(Ok(Frame::Frame(f))) => f,
            Ok(Ok(Frame::Closed)) | Err(_) => break,
            Ok(Err(e)) => {
                tracing::warn!(rank, error = %e, "malformed frame; closing the connection");
                break;
            }
        };
        match decode_client(&frame) {
            Ok((req, request)) => {
                if events.send(Event::Request { conn, req, request }).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(rank, error = %e, "undecodable request; closing the connection");
                break;
            }
        }
    }
    let _ = r.shutdown(std::net::Shutdown::Both);
    let _ = events.send(Event::Gone { conn });
}

fn tool(mut s: UnixStream, events: &Sender<Event>) {
    if s.write_all(&[HELLO_OK]).is_err() {
        return;
    }
    let Ok(r) = s.try_clone() else { return };
    let mut line = String::new();
    if BufReader::new(r).read_line(&mut line).is_err() {
        return;
    }
    let (reply, answer) = std::sync::mpsc::channel();
    if events.send(Event::Tool { line, reply }).is_err() {
        return;
    }
    let text = answer
        .recv()
        .unwrap_or_else(|_| "error: the job ended\n".into());
    let _ = s.write_all(text.as_bytes());
}
