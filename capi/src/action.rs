//! What a machine wants done, handed to C one action at a time: a fixed
//! [`dynres_action`] and a variable payload copied into the caller's buffer. An action
//! whose payload does not fit stays queued until a call with a buffer large enough.

use std::ffi::c_int;

use dynres_core::Machine as _;

use crate::error::{CapiError, CapiResult};
use crate::types::put;

/// No action is waiting: the machine is idle until its next input or timeout.
pub const DYNRES_ACTION_NONE: i32 = 0;
/// Master: pass the payload (a frame) to `dynres_daemon_handle_master` of daemon
/// `node`, after every earlier frame for that daemon (the link is ordered, RC-3).
pub const DYNRES_ACTION_SEND_TO_DAEMON: i32 = 1;
/// Master: change `payload` (a pset name and a NUL) moved to status `status`.
pub const DYNRES_ACTION_STATUS: i32 = 2;
/// Master: the external request `id` (its ticket) was refused with `error`; the
/// payload is the message and a NUL.
pub const DYNRES_ACTION_REFUSED: i32 = 3;
/// Master: the external request `id` (its ticket) was announced as the change whose
/// delta pset is the payload (a name and a NUL); its outcome is that change's status.
pub const DYNRES_ACTION_STARTED: i32 = 4;
/// Master: node `node` got its first process of the job.
pub const DYNRES_ACTION_NODE_ALLOCATED: i32 = 5;
/// Master: node `node` has no process of the job left.
pub const DYNRES_ACTION_NODE_RELEASED: i32 = 6;
/// Master: process `rank` exited without the protocol removing it (RC-18).
pub const DYNRES_ACTION_PROCESS_LOST: i32 = 7;
/// Daemon: pass the payload (a frame) to `dynres_master_handle` as from this daemon's
/// node.
pub const DYNRES_ACTION_SEND_TO_MASTER: i32 = 8;
/// Daemon: pass the payload (a frame) to `dynres_client_handle` of process `rank`.
pub const DYNRES_ACTION_SEND_TO_CLIENT: i32 = 9;
/// Daemon: start processes here; the payload is their ranks, `len / 4` native-endian
/// `uint32_t`s (copy them out with memcpy if the buffer is not aligned).
pub const DYNRES_ACTION_LAUNCH: i32 = 10;
/// Daemon: kill these local processes (SIGKILL) and report their exit as usual; the
/// payload is their ranks as for `DYNRES_ACTION_LAUNCH`.
pub const DYNRES_ACTION_KILL: i32 = 11;
/// Client: pass the payload (a frame) to `dynres_daemon_handle_client` as from this
/// client's rank.
pub const DYNRES_ACTION_SEND_REQUEST: i32 = 12;
/// Client: call `id` completed; its result is in the `dynres_result` the poll filled.
pub const DYNRES_ACTION_DONE: i32 = 13;
/// Master: a change request needs `id` more slots than the job has (RC-21). Never
/// reported to C callers: their masters are created without `grow_wait`.
pub const DYNRES_ACTION_NEED_SLOTS: i32 = 14;
/// Daemon: start spawned children here (SPAWN-18). The payload is `uint32_t nranks`,
/// `nranks` ranks, `uint32_t argc`, `uint32_t envc` (all native-endian), then
/// NUL-terminated strings: the children's application (their `DYNRES_APP`), the
/// program, `argc` arguments and `envc` `NAME=VALUE` entries to add to their
/// environment.
pub const DYNRES_ACTION_SPAWN: i32 = 15;
/// Master: a spawned child (`rank`) exited (SPAWN-19); not a loss of the job.
pub const DYNRES_ACTION_SPAWNED_EXITED: i32 = 16;
/// Master: a change was ABORTED; the frame is the delta pset's name, a NUL, then why
/// (a NUL-terminated text). Comes just before the change's `DYNRES_ACTION_STATUS`.
pub const DYNRES_ACTION_ABORTED: i32 = 17;
/// Master: send this data-server request of one of the job's processes to the job whose
/// data server the job uses (NAMES-1); `id` is the master's ticket, the frame the
/// request's client frame (`spec/wire.md`) under that ticket. Only a master set up with
/// another job's data server asks it; this ABI sets none up, so it is never asked yet.
pub const DYNRES_ACTION_FORWARD_DATA: i32 = 18;
/// Master: the answer to a guest job's data-server request (NAMES-2); `id` is the
/// guest's ticket, the frame the reply frame under that ticket. Only a master fed guest
/// requests answers them; this ABI feeds none yet.
pub const DYNRES_ACTION_GUEST_REPLY: i32 = 19;

/// One action. Fields that an action kind does not use are 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct dynres_action {
    /// `DYNRES_ACTION_*`.
    pub kind: i32,
    /// The daemon's node (`SEND_TO_DAEMON`, `NODE_ALLOCATED`, `NODE_RELEASED`).
    pub node: u32,
    /// The process' rank in the job's namespace (`SEND_TO_CLIENT`, `PROCESS_LOST`).
    pub rank: u32,
    /// `DYNRES_STATUS_*` (`STATUS`).
    pub status: i32,
    /// An error code (`REFUSED`; `DONE`: the call's, `DYNRES_OK` if it succeeded).
    pub error: i32,
    /// The ticket (`STARTED`, `REFUSED`) or the call id (`DONE`).
    pub id: u64,
    /// Bytes of payload: written to the buffer, or needed when it was too small.
    pub len: usize,
}

/// An action in the making: the fixed part and the payload.
pub struct Encoded<X = ()> {
    /// The fixed part (`len` is set on hand-over).
    pub action: dynres_action,
    /// The payload.
    pub payload: Vec<u8>,
    /// Anything else the caller of the machine gets (the client's result).
    pub extra: X,
}

impl Encoded {
    /// An action of `kind` with a payload.
    pub fn new(kind: i32, payload: Vec<u8>) -> Self {
        Encoded {
            action: dynres_action {
                kind,
                ..dynres_action::default()
            },
            payload,
            extra: (),
        }
    }

    /// The same action, carrying `extra` too.
    pub fn with<X>(self, extra: X) -> Encoded<X> {
        Encoded {
            action: self.action,
            payload: self.payload,
            extra,
        }
    }
}

/// A kernel machine behind a C handle: the machine itself (its `poll_output` and
/// `poll_timeout` come from [`dynres_core::Machine`], so they are not restated here),
/// its output held back while a buffer is too small, and how each output becomes an
/// action.
pub trait Handle: crate::error::Poison {
    /// The kernel machine inside.
    type Kernel: dynres_core::Machine;
    /// What a caller gets besides the action (the client's result).
    type Extra;
    /// The machine inside.
    fn kernel(&self) -> &Self::Kernel;
    /// The machine and the output held back by a too-small buffer, borrowed together.
    fn parts(&mut self) -> (&mut Self::Kernel, &mut Option<Output<Self>>);
    /// The action of an output.
    fn encode(o: &Output<Self>) -> Encoded<Self::Extra>;
}

/// The output type of the machine behind a handle.
pub type Output<H> = <<H as Handle>::Kernel as dynres_core::Machine>::Output;

/// Hands the next output over: takes it from the held-back one (or polls the machine),
/// encodes it, and writes it to `*action` and `buf`. If `cap` is below the payload's
/// size, the output is held back, `*action` tells its kind and `len` the size needed,
/// and the call fails with `DYNRES_ERR_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `action` is NULL or writable; `buf` is NULL or valid for `cap` byte writes.
pub unsafe fn hand_over<M: Handle>(
    m: &mut M,
    action: *mut dynres_action,
    buf: *mut u8,
    cap: usize,
) -> Result<Option<M::Extra>, CapiError> {
    crate::types::need(action, "action")?;
    let (kernel, pending) = m.parts();
    if pending.is_none() {
        *pending = kernel.poll_output();
    }
    let Some(out) = pending.as_ref() else {
        // SAFETY: checked non-NULL above; writable by the caller's promise.
        unsafe { put(action, dynres_action::default(), "action")? };
        return Ok(None);
    };
    let Encoded {
        action: mut a,
        payload,
        extra,
    } = M::encode(out);
    a.len = payload.len();
    // SAFETY: as above.
    unsafe { put(action, a, "action")? };
    copy_payload(&payload, buf, cap)?;
    *pending = None;
    Ok(Some(extra))
}

/// `*_poll_output` of a machine whose actions carry nothing else.
///
/// # Safety
/// `m` is NULL or a live handle; the rest as [`hand_over`].
pub unsafe fn poll_output<M: Handle>(
    m: *mut M,
    action: *mut dynres_action,
    buf: *mut u8,
    cap: usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::error::guard_handle(m, |m| hand_over(m, action, buf, cap).map(|_| ())) }
}

/// `*_poll_timeout` of a machine: `*armed` 1 and `*deadline_ns` the deadline, or
/// `*armed` 0.
///
/// # Safety
/// `m` is NULL or a live handle; both pointers are NULL or writable.
pub unsafe fn poll_timeout<M: Handle>(
    m: *mut M,
    deadline_ns: *mut u64,
    armed: *mut c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        crate::error::guard_handle(m, |m| {
            crate::types::need(armed, "armed")?;
            let t = m.kernel().poll_timeout();
            put(deadline_ns, t.map_or(0, |t| t.0), "deadline_ns")?;
            put(armed, c_int::from(t.is_some()), "armed")
        })
    }
}

fn copy_payload(payload: &[u8], buf: *mut u8, cap: usize) -> CapiResult {
    if payload.len() > cap {
        return Err(CapiError::TooSmall {
            what: "buffer",
            needed: payload.len(),
            capacity: cap,
        });
    }
    if payload.is_empty() {
        return Ok(());
    }
    if buf.is_null() {
        return Err(CapiError::Null("buf"));
    }
    // SAFETY: `buf` holds `cap >= payload.len()` bytes by the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), buf, payload.len()) };
    Ok(())
}

/// The frame in `(frame, len)`.
///
/// # Safety
/// `frame` is NULL or valid for `len` byte reads.
pub unsafe fn frame<'a>(frame: *const u8, len: usize) -> Result<&'a [u8], CapiError> {
    if frame.is_null() {
        return Err(CapiError::Null("frame"));
    }
    // SAFETY: forwarded.
    unsafe { crate::types::slice(frame, len, "frame") }
}

/// Total bytes of the frame that starts at `header` (header and body), from its
/// header's first `DYNRES_FRAME_HEADER_LEN` bytes: for reading frames off a stream.
///
/// `len` is how many bytes are at `header`; fewer than a header fails with
/// `DYNRES_ERR_WIRE_TRUNCATED`, bytes that are no frame header with
/// `DYNRES_ERR_WIRE_BAD_MAGIC` or `DYNRES_ERR_WIRE_UNKNOWN_VERSION`.
/// Ownership: `header` is borrowed for the call.
///
/// # Safety
/// `header` is NULL or valid for `len` byte reads; `frame_len` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_frame_len(
    header: *const u8,
    len: usize,
    frame_len: *mut usize,
) -> c_int {
    use dynres_core::wire::{HEADER_LEN, WireError, split_frame};
    crate::error::guard(|| {
        // SAFETY: forwarded.
        let bytes = unsafe { frame(header, len) }?;
        let head = &bytes[..bytes.len().min(HEADER_LEN)];
        // Checks the magic and the version of what is there.
        split_frame(head, u32::MAX)?;
        let [_, _, _, _, _, a, b, c, d] = head else {
            return Err(WireError::Truncated.into());
        };
        let body = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
        // SAFETY: forwarded.
        unsafe { put(frame_len, HEADER_LEN + body, "frame_len") }
    })
}
