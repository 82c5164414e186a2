//! One data server for several jobs (`spec/runtime.md` NAMES-1..3), the runtime's part:
//! carrying the requests core's master forwards to the job whose data server this job
//! uses, and serving the requests of guest jobs that use ours. What is forwarded and
//! what a guest may ask is core's (`Master`, `MasterInput::Guest`); this only moves
//! frames.
//!
//! The two jobs meet on the serving job's `cli.sock`, where a tool proves with the
//! job's secret that it is the job's user's (`tool::command`). A forwarded request is
//! one connection: its line is `data HEX` (the rc client frame), its answer `ok HEX`
//! (the reply frame), both parsed by core's nom decoders. A lookup that waits holds its
//! connection open; a thread per request carries it, so the engine never blocks.

use std::sync::mpsc::Sender;

use dynres_core::rc::wire::{decode_reply, encode_client, encode_reply};
use dynres_core::rc::{ClientReply, ClientRequest, MasterInput};
use dynres_core::trace::{hex, unhex};

use super::{Engine, Event};
use crate::ioloop::ToolReply;

/// Where the requests of a job that uses another job's data server go (NAMES-1).
pub struct NameServer {
    /// The serving job, as tools name it (its id).
    pub job: String,
    /// Where a request's thread reports the answer.
    pub events: Sender<Event>,
}

impl Engine {
    /// Lets the master's forwarded data-server requests reach `server` (NAMES-1).
    pub fn with_name_server(mut self, server: NameServer) -> Engine {
        self.name_server = Some(server);
        self
    }

    /// NAMES-1: carries one forwarded request to the serving job on a thread of its
    /// own; its answer comes back as [`Event::Named`].
    pub(super) fn forward_names(&mut self, ticket: u64, request: ClientRequest) {
        let Some(server) = &self.name_server else {
            // Core forwards only when told to, and then the server is set.
            tracing::error!("a data-server request to forward, but no job to forward it to");
            return self.master_input(MasterInput::Forwarded {
                ticket,
                reply: None,
            });
        };
        let (job, events) = (server.job.clone(), server.events.clone());
        let line = format!("data {}", hex(&encode_client(ticket, &request)));
        let spawned = std::thread::Builder::new()
            .name("dynres-names".into())
            .spawn(move || {
                let reply = crate::tool::command(&job, &line)
                    .map_err(|e| e.to_string())
                    .and_then(|answer| reply_of(&answer));
                let _ = events.send(Event::Named { ticket, reply });
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "no thread to reach the data server's job");
            self.master_input(MasterInput::Forwarded {
                ticket,
                reply: None,
            });
        }
    }

    /// NAMES-3: the serving job answered (or could not be reached): core relays it, or
    /// an error of the request's kind, to the client.
    pub(super) fn on_named(&mut self, ticket: u64, reply: Result<ClientReply, String>) {
        let reply = reply
            .inspect_err(|why| {
                tracing::warn!(%why, "the data server's job gave no answer");
            })
            .ok();
        self.master_input(MasterInput::Forwarded { ticket, reply });
    }

    /// NAMES-2: a guest job's request from `cli.sock`, handed to core under a ticket;
    /// its answer is written when core gives it (a lookup may wait).
    pub(super) fn on_guest(&mut self, frame: &[u8], reply: ToolReply) {
        let request = match dynres_core::rc::wire::decode_client(frame) {
            Ok((_, r)) => r,
            Err(e) => return reply.send(format!("error: bad data frame: {e}\n")),
        };
        self.next_guest += 1;
        let ticket = self.next_guest;
        self.guests.insert(ticket, reply);
        self.master_input(MasterInput::Guest { ticket, request });
    }

    /// NAMES-2: core's answer to a guest, as the reply frame in hex.
    pub(super) fn guest_reply(&mut self, ticket: u64, reply: &ClientReply) {
        if let Some(tool) = self.guests.remove(&ticket) {
            tool.send(format!("ok {}\n", hex(&encode_reply(ticket, reply))));
        }
    }
}

/// The reply in a serving job's answer (`ok HEX`, without the `ok` that
/// `tool::command` checked).
fn reply_of(answer: &str) -> Result<ClientReply, String> {
    let frame = unhex(answer.trim())
        .ok_or_else(|| format!("not a data-server answer: {:?}", answer.trim()))?;
    decode_reply(&frame)
        .map(|(_, r)| r)
        .map_err(|e| format!("the answer does not decode: {e}"))
}
