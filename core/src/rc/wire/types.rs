//! Message-type numbers of the resource-change protocol (`spec/wire.md`). Requests are
//! numbered from `0xNN01` in their owner's range; the reply to a request has the same
//! number with the high bit of the low byte set ([`REPLY_BIT`]), so a trace shows at a
//! glance which request a reply answers. Daemon ↔ master control messages sit in
//! `0xNN10` and up, away from the client requests.

/// Set in the low byte of a reply's type: reply type = request type `| REPLY_BIT`.
pub const REPLY_BIT: u16 = 0x0080;

/// Client → daemon: `get_res_change` ([`ClientRequest::Query`](crate::rc::ClientRequest::Query)).
pub const QUERY: u16 = 0x0201;
/// Client → daemon: accept a change.
pub const ACCEPT: u16 = 0x0202;
/// Client → daemon: a new process' confirm outcome.
pub const CONFIRM: u16 = 0x0203;
/// Client → daemon: `request_res_change`.
pub const REQUEST_CHANGE: u16 = 0x0204;
/// Client → daemon: start the children of a spawn (`SPAWN-17`).
pub const SPAWN: u16 = 0x0205;
/// Client → daemon: kill the children of a failed spawn (`SPAWN-20`).
pub const KILL_SPAWN: u16 = 0x0206;
/// Client → daemon: a batch of pset operations.
pub const PSET_OP: u16 = 0x0301;
/// Client → daemon: size and attributes of a pset.
pub const PSET_INFO: u16 = 0x0302;
/// Client → daemon: publish a key.
pub const PUBLISH: u16 = 0x0401;
/// Client → daemon: look a key up.
pub const LOOKUP: u16 = 0x0402;
/// Client → daemon: barrier over a pset.
pub const FENCE: u16 = 0x0403;
/// Client → daemon: remove a published key.
pub const UNPUBLISH: u16 = 0x0404;
/// Client → daemon: fence exchanging one value per member (modex).
pub const MODEX: u16 = 0x0405;

/// Daemon → client: reply to [`QUERY`].
pub const QUERY_REPLY: u16 = QUERY | REPLY_BIT;
/// Daemon → client: reply to [`ACCEPT`].
pub const ACCEPT_REPLY: u16 = ACCEPT | REPLY_BIT;
/// Daemon → client: reply to [`CONFIRM`].
pub const CONFIRM_REPLY: u16 = CONFIRM | REPLY_BIT;
/// Daemon → client: reply to [`REQUEST_CHANGE`].
pub const REQUEST_CHANGE_REPLY: u16 = REQUEST_CHANGE | REPLY_BIT;
/// Daemon → client: reply to [`SPAWN`].
pub const SPAWN_REPLY: u16 = SPAWN | REPLY_BIT;
/// Daemon → client: reply to [`KILL_SPAWN`].
pub const KILL_SPAWN_REPLY: u16 = KILL_SPAWN | REPLY_BIT;
/// Daemon → client: reply to [`PSET_OP`].
pub const PSET_OP_REPLY: u16 = PSET_OP | REPLY_BIT;
/// Daemon → client: reply to [`PSET_INFO`].
pub const PSET_INFO_REPLY: u16 = PSET_INFO | REPLY_BIT;
/// Daemon → client: reply to [`PUBLISH`].
pub const PUBLISH_REPLY: u16 = PUBLISH | REPLY_BIT;
/// Daemon → client: reply to [`LOOKUP`].
pub const LOOKUP_REPLY: u16 = LOOKUP | REPLY_BIT;
/// Daemon → client: reply to [`FENCE`].
pub const FENCE_REPLY: u16 = FENCE | REPLY_BIT;
/// Daemon → client: reply to [`UNPUBLISH`].
pub const UNPUBLISH_REPLY: u16 = UNPUBLISH | REPLY_BIT;
/// Daemon → client: reply to [`MODEX`].
pub const MODEX_REPLY: u16 = MODEX | REPLY_BIT;

/// Daemon → master: a forwarded client request.
pub const FORWARD: u16 = 0x0210;
/// Daemon → master: a local process exited.
pub const EXITED: u16 = 0x0211;
/// Daemon → master: the node's batch of a modex.
pub const MODEX_BATCH: u16 = 0x0212;
/// Daemon → master: a local process reached its MPI library (`SPAWN-25`).
pub const STARTED: u16 = 0x0213;

/// Master → daemon: reply to a forwarded request.
pub const REPLY: u16 = 0x0220;
/// Master → daemon: define, update or unpublish a change.
pub const CHANGE: u16 = 0x0221;
/// Master → daemon: job data update.
pub const JOB_DATA: u16 = 0x0222;
/// Master → daemon: launch local processes.
pub const LAUNCH: u16 = 0x0223;
/// Master → daemon: kill local processes.
pub const KILL: u16 = 0x0224;
/// Master → daemon: the outcome of a modex.
pub const MODEX_DONE: u16 = 0x0225;
/// Master → daemon: launch local children of a spawn, with their command.
pub const SPAWN_LAUNCH: u16 = 0x0226;
/// Master → daemon: define or update a pset in the replica.
pub const DEFINE_PSET: u16 = 0x0310;
/// Master → daemon: drop a pruned pset from the replica.
pub const PRUNE_PSET: u16 = 0x0311;
