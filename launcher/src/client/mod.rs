//! The client library: what an application process links to talk to its runtime.
//!
//! A [`Session`] wraps core's [`Client`] state machine with blocking calls over the
//! job's control socket (one call at a time). Resource-change calls follow the thesis'
//! API (Lst. 6.1–6.7): [`Session::get_res_change`], [`Session::pset_create_op`],
//! [`Session::accept_res_change`] (non-blocking) and
//! [`Session::accept_res_change_blocking`], [`Session::confirm_res_change`],
//! [`Session::request_res_change`]; plus the data server ([`Session::publish`],
//! [`Session::lookup`]) and [`Session::fence`].

mod session;

pub use session::{PsetInfo, Session};
