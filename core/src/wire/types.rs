//! The message-type number space. Each protocol owns one `0xNNxx` range so the kernel's
//! machines can share one header without coordinating inside a range.

/// `0x01xx`: spawn / accept-connect / join handshakes and the datagram bootstrap.
pub const SPAWN_RANGE: core::ops::RangeInclusive<u16> = 0x0100..=0x01ff;
/// `0x02xx`: resource-change messages (`spec/wire.md`, `rc::wire`).
pub const RESOURCE_CHANGE_RANGE: core::ops::RangeInclusive<u16> = 0x0200..=0x02ff;
/// `0x03xx`: pset operations.
pub const PSET_RANGE: core::ops::RangeInclusive<u16> = 0x0300..=0x03ff;
/// `0x04xx`: publish / lookup / fence (reserved for the lead).
pub const PUBLISH_RANGE: core::ops::RangeInclusive<u16> = 0x0400..=0x04ff;

/// Handshake: initiator root → acceptor root, its (group id, size, context id).
pub const HELLO: u16 = 0x0101;
/// Handshake: acceptor root → initiator root, acknowledges and carries its own triple.
pub const HELLO_ACK: u16 = 0x0102;
/// Handshake: one root's complete per-rank endpoint table.
pub const ENDPOINTS: u16 = 0x0103;
/// Handshake: the peer's endpoint table was received in full.
pub const ENDPOINTS_ACK: u16 = 0x0104;
/// Handshake: the sender gives up; the receiver must drop the connection.
pub const ABORT: u16 = 0x0105;
/// Join: the port a process listens on, sent over the joined byte stream.
pub const JOIN_PORT: u16 = 0x0106;
/// Root → member: the remote group's triple (`MemberMsg::RemoteGroup`).
pub const MEMBER_REMOTE_GROUP: u16 = 0x0120;
/// Root → member: the remote group's endpoint table (`MemberMsg::RemoteEndpoints`).
pub const MEMBER_REMOTE_ENDPOINTS: u16 = 0x0121;
/// Root → member: the handshake failed or was revoked (`MemberMsg::Failed`).
pub const MEMBER_FAILED: u16 = 0x0122;
/// Datagram bootstrap: one checksummed segment of a handshake message.
pub const DGRAM_SEGMENT: u16 = 0x0110;
/// Datagram bootstrap: acknowledges one segment.
pub const DGRAM_ACK: u16 = 0x0111;
