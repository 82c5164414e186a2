//! placeholder
/// p
pub struct Router;
/// p
pub struct PeerRef;
