//! One data server for several jobs (`spec/runtime.md` NAMES-1..3): a job started with
//! another job's data server forwards its applications' publish, lookup and unpublish
//! there, and that job's master serves them as a guest's.
//!
//! MPI programs of two jobs meet through names: MPICH's ports carry their address, but
//! Open MPI's connect/accept publishes each side's processes and looks up the other's.
//! Each job's master serves only its own job, so the two sides would never see each
//! other's keys; a shared data server is how PRRTE's DVM and `ompi-server` solve it.
//!
//! The master decides what goes where; the driver carries forwarded requests to the
//! other job (over its authenticated tool socket) and brings the answers back.

use super::{Master, MasterOutput, Route};
use crate::bugs::Bug;
use crate::process::ProcessId;
use crate::rc::error::RcError;
use crate::rc::input::DataServer;
use crate::rc::msg::{ClientReply, ClientRequest};
use crate::rc::types::NodeId;
use crate::time::Instant;

/// The node of a guest's [`Route`]: no daemon has it, so a reply to it leaves as
/// [`MasterOutput::GuestReply`] instead of a message to a node.
pub(crate) const GUEST_NODE: NodeId = NodeId(u32::MAX);

impl Master {
    /// NAMES-1: whether another job's master serves this application request. The
    /// protocol's own keys (`RC-16`, the accept and confirm keys of this job's changes)
    /// stay here: they are this job's business only.
    pub(crate) fn forwards(&self, request: &ClientRequest) -> bool {
        if self.cfg.data_server != DataServer::Forwarded {
            return false;
        }
        let key = match request {
            ClientRequest::Publish { key, .. }
            | ClientRequest::Lookup { key, .. }
            | ClientRequest::Unpublish { key } => key.as_str(),
            _ => return false,
        };
        !super::data::is_reserved(key) || self.bug(Bug::ForwardReservedKey)
    }

    /// NAMES-1: hands a request [`Master::forwards`] to the driver under a new ticket.
    pub(crate) fn forward(&mut self, route: Route, request: ClientRequest) {
        let ticket = self.next_forward;
        self.next_forward += 1;
        let refusal = refusal(&request, RcError::Client("no answer"));
        self.forwarded.insert(ticket, (route, refusal));
        self.out
            .push_back(MasterOutput::ForwardData { ticket, request });
    }

    /// NAMES-1, NAMES-3: the other job's answer to a forwarded request reaches its
    /// client. No answer (the job could not be reached, it ended, its answer did not
    /// decode) or one of another kind than the request's is an error of the request's
    /// kind: the other job is a peer, not trusted to answer in kind. An answer to no
    /// open ticket (late, repeated) is dropped.
    pub(crate) fn on_forwarded(&mut self, ticket: u64, reply: Option<ClientReply>) {
        let Some((route, refusal)) = self.forwarded.remove(&ticket) else {
            return;
        };
        if reply.is_none() && self.bug(Bug::LostForwardUnanswered) {
            return;
        }
        let reply = match reply {
            Some(r) if core::mem::discriminant(&r) == core::mem::discriminant(&refusal) => r,
            Some(r) if self.bug(Bug::ForwardedReplyOfAnyKind) => r,
            _ => refusal,
        };
        self.reply(&route, reply);
    }

    /// NAMES-2: a guest job's data-server request, served as a client's of this job
    /// (reserved keys refused, lookups that wait parked); anything else is refused.
    pub(crate) fn on_guest(&mut self, now: Instant, ticket: u64, request: ClientRequest) {
        let route = Route {
            node: GUEST_NODE,
            pid: guest(self),
            req: ticket,
        };
        self.serve_data(now, route, request);
    }

    /// A publish, lookup or unpublish of a client (`RC-16`) or a guest (NAMES-2):
    /// publish never overwrites and refuses reserved keys, a lookup that waits is
    /// parked. Any other request is refused (`NotPermitted`): only a guest's driver
    /// passes one here, and it sends none.
    pub(crate) fn serve_data(&mut self, now: Instant, route: Route, request: ClientRequest) {
        match request {
            ClientRequest::Publish { key, value } => {
                let r = self.publish(now, &key, value, true);
                self.reply(&route, ClientReply::Published(r));
            }
            ClientRequest::Lookup { key, wait } => self.lookup(now, route, key, wait),
            ClientRequest::Unpublish { key } => {
                let r = self.unpublish(&key);
                self.reply(&route, ClientReply::Unpublished(r));
            }
            other => {
                let err = RcError::NotPermitted(route.pid.clone());
                self.reply(&route, refusal(&other, err));
            }
        }
    }
}

/// The identity a guest's requests carry: no process of the job has it (ranks are
/// handed out from 0 and never reach `u32::MAX`).
fn guest(m: &Master) -> ProcessId {
    ProcessId::new(m.cfg.namespace.clone(), u32::MAX)
}

/// `err` as the reply to `request`, for the data-server requests; any other request is
/// answered as a refused publish (a guest's driver sends none).
fn refusal(request: &ClientRequest, err: RcError) -> ClientReply {
    match request {
        ClientRequest::Lookup { .. } => ClientReply::Lookup(Err(err)),
        ClientRequest::Unpublish { .. } => ClientReply::Unpublished(Err(err)),
        _ => ClientReply::Published(Err(err)),
    }
}
