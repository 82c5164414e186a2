//! Error codes, the thread-local last-error message, and the guard every entry point
//! runs in (null checks happen inside it; a panic becomes [`DYNRES_ERR_PANIC`]).

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use dynres_client::ClientError;
use dynres_core::pset::{NameError, PsetError};
use dynres_core::rc::{ClientRejection, DaemonRejection, MasterRejection, RcError};
use dynres_core::wire::WireError;

/// Success.
pub const DYNRES_OK: c_int = 0;
/// A pointer the function needs was NULL. Nothing was done.
pub const DYNRES_ERR_NULL: c_int = 1;
/// The caller's buffer is too small. The function stored the size it needs (in bytes,
/// or in elements where documented) and kept what it had to hand over for the next call.
pub const DYNRES_ERR_BUFFER_TOO_SMALL: c_int = 2;
/// An argument is out of its range: an unknown constant, a string that is not UTF-8, a
/// count too large.
pub const DYNRES_ERR_INVALID_ARGUMENT: c_int = 3;
/// A pset name does not follow the grammar of `spec/psets.md` (PSET-1/2).
pub const DYNRES_ERR_BAD_NAME: c_int = 4;
/// Rust code panicked inside the library. The panic was caught; the handle it happened
/// on is poisoned (see [`DYNRES_ERR_POISONED`]).
pub const DYNRES_ERR_PANIC: c_int = 5;
/// The handle was poisoned by an earlier panic and refuses every call but its `_free`.
pub const DYNRES_ERR_POISONED: c_int = 6;
/// A variable `dynres run` sets is missing: the process was not started by `dynres run`.
pub const DYNRES_ERR_ENV: c_int = 7;
/// The control connection to the runtime failed (or the runtime closed it).
pub const DYNRES_ERR_IO: c_int = 8;
/// The runtime refused the connection (wrong secret or rank).
pub const DYNRES_ERR_CONNECTION_REFUSED: c_int = 9;
/// The runtime answered a call with the result of another call.
pub const DYNRES_ERR_UNEXPECTED: c_int = 10;

/// Base of the malformed-frame codes: `DYNRES_ERR_WIRE + n`, `n` one of the kinds below.
pub const DYNRES_ERR_WIRE: c_int = 200;
/// A frame does not start with the magic bytes `"DR"`.
pub const DYNRES_ERR_WIRE_BAD_MAGIC: c_int = 201;
/// A frame's protocol version is not one this library speaks.
pub const DYNRES_ERR_WIRE_UNKNOWN_VERSION: c_int = 202;
/// A frame's message type is unknown, or not one this function accepts.
pub const DYNRES_ERR_WIRE_UNKNOWN_TYPE: c_int = 203;
/// A frame or a field in it ends early.
pub const DYNRES_ERR_WIRE_TRUNCATED: c_int = 204;
/// The header's body length disagrees with the bytes given.
pub const DYNRES_ERR_WIRE_LENGTH_MISMATCH: c_int = 205;
/// Bytes are left over after the message.
pub const DYNRES_ERR_WIRE_TRAILING_BYTES: c_int = 206;
/// A string field is not UTF-8.
pub const DYNRES_ERR_WIRE_NOT_UTF8: c_int = 207;
/// A length or count is over its limit.
pub const DYNRES_ERR_WIRE_OVER_LIMIT: c_int = 208;
/// A field holds a value outside its set (an enum tag, a bad pset name).
pub const DYNRES_ERR_WIRE_INVALID_VALUE: c_int = 209;
/// A checksum does not match.
pub const DYNRES_ERR_WIRE_CHECKSUM: c_int = 210;

/// Base of the protocol's own errors: `DYNRES_ERR_RC + c`, `c` the kernel's stable
/// error code (`RcError::code`, `spec/wire.md`), the same on every peer.
pub const DYNRES_ERR_RC: c_int = 1000;
/// A pset request was refused (unknown pset, not permitted, empty result, …).
pub const DYNRES_ERR_RC_PSET: c_int = DYNRES_ERR_RC + 1;
/// Not enough free slots, or not enough processes to remove.
pub const DYNRES_ERR_RC_SLOTS: c_int = DYNRES_ERR_RC + 2;
/// The change request is inconsistent (zero size, unknown application, …).
pub const DYNRES_ERR_RC_BAD_REQUEST: c_int = DYNRES_ERR_RC + 3;
/// No change is known under this delta pset.
pub const DYNRES_ERR_RC_NO_SUCH_CHANGE: c_int = DYNRES_ERR_RC + 4;
/// The change was aborted (its job data rolled back).
pub const DYNRES_ERR_RC_ABORTED: c_int = DYNRES_ERR_RC + 5;
/// The change is already finalized.
pub const DYNRES_ERR_RC_ALREADY_FINALIZED: c_int = DYNRES_ERR_RC + 6;
/// The accept names a pset the change is not bound to.
pub const DYNRES_ERR_RC_NOT_BOUND: c_int = DYNRES_ERR_RC + 7;
/// The accept's new pset does not reflect the change (RC-9).
pub const DYNRES_ERR_RC_NEW_PSET_MISMATCH: c_int = DYNRES_ERR_RC + 8;
/// Too many changes are queued for the application (RC-15).
pub const DYNRES_ERR_RC_QUEUE_FULL: c_int = DYNRES_ERR_RC + 9;
/// The key is reserved for the protocol (`{delta}:accept`, `{delta}:confirm`).
pub const DYNRES_ERR_RC_RESERVED_KEY: c_int = DYNRES_ERR_RC + 10;
/// The key is already published (publish never overwrites).
pub const DYNRES_ERR_RC_KEY_EXISTS: c_int = DYNRES_ERR_RC + 11;
/// The key is not published.
pub const DYNRES_ERR_RC_NO_SUCH_KEY: c_int = DYNRES_ERR_RC + 12;
/// A lookup, fence or blocking accept ran out of time.
pub const DYNRES_ERR_RC_TIMEOUT: c_int = DYNRES_ERR_RC + 13;
/// The process is not known to the job, or may not do this.
pub const DYNRES_ERR_RC_NOT_PERMITTED: c_int = DYNRES_ERR_RC + 14;
/// A client call was made in a state that does not allow it (e.g. a call id in use).
pub const DYNRES_ERR_RC_CLIENT: c_int = DYNRES_ERR_RC + 15;
/// A process the request depended on was lost (RC-18).
pub const DYNRES_ERR_RC_PROCESS_LOST: c_int = DYNRES_ERR_RC + 16;
/// A modex ran over a pset version that is no longer current; ask again (MODEX-2).
pub const DYNRES_ERR_RC_STALE: c_int = DYNRES_ERR_RC + 17;
/// The resource manager did not grant the slots a change request needed (RC-21).
pub const DYNRES_ERR_RC_NOT_GRANTED: c_int = DYNRES_ERR_RC + 18;

/// Everything that can go wrong at the boundary, with its code.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    /// A required pointer was NULL.
    #[error("{0} is NULL")]
    Null(&'static str),
    /// An output buffer is too small.
    #[error("{what}: {needed} needed, capacity {capacity}")]
    TooSmall {
        /// Which buffer.
        what: &'static str,
        /// The size it needs.
        needed: usize,
        /// The size given.
        capacity: usize,
    },
    /// An argument out of its range.
    #[error("{0}")]
    InvalidArgument(String),
    /// A pset name that does not parse.
    #[error("bad pset name: {0}")]
    Name(#[from] NameError),
    /// A malformed frame.
    #[error("malformed frame: {0}")]
    Wire(#[from] WireError),
    /// The kernel refused.
    #[error("{0}")]
    Rc(#[from] RcError),
    /// The pset registry refused.
    #[error("{0}")]
    Pset(#[from] PsetError),
    /// The client library failed.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// A panic was caught.
    #[error("panic inside dynres: {0}")]
    Panic(String),
    /// The handle was poisoned by an earlier panic.
    #[error("{0} was poisoned by an earlier panic")]
    Poisoned(&'static str),
}

// A machine's rejection reaches C as the refusal it maps to (core's one `From` per
// role), so its code and text are those C callers always got.
impl From<MasterRejection> for CapiError {
    fn from(r: MasterRejection) -> Self {
        CapiError::Rc(r.into())
    }
}

impl From<DaemonRejection> for CapiError {
    fn from(r: DaemonRejection) -> Self {
        CapiError::Rc(r.into())
    }
}

impl From<ClientRejection> for CapiError {
    fn from(r: ClientRejection) -> Self {
        CapiError::Rc(r.into())
    }
}

fn wire_code(e: &WireError) -> c_int {
    match e {
        WireError::BadMagic { .. } => DYNRES_ERR_WIRE_BAD_MAGIC,
        WireError::UnknownVersion { .. } => DYNRES_ERR_WIRE_UNKNOWN_VERSION,
        WireError::UnknownType { .. } => DYNRES_ERR_WIRE_UNKNOWN_TYPE,
        WireError::Truncated => DYNRES_ERR_WIRE_TRUNCATED,
        WireError::LengthMismatch { .. } => DYNRES_ERR_WIRE_LENGTH_MISMATCH,
        WireError::TrailingBytes { .. } => DYNRES_ERR_WIRE_TRAILING_BYTES,
        WireError::NotUtf8 => DYNRES_ERR_WIRE_NOT_UTF8,
        WireError::OverLimit { .. } => DYNRES_ERR_WIRE_OVER_LIMIT,
        // Fields that do not fit together are invalid values of the message: the C ABI
        // keeps its codes.
        WireError::InvalidValue { .. } | WireError::Inconsistent { .. } => {
            DYNRES_ERR_WIRE_INVALID_VALUE
        }
        WireError::Checksum { .. } => DYNRES_ERR_WIRE_CHECKSUM,
    }
}

/// The C code of a kernel error: [`DYNRES_ERR_RC`] plus its stable code.
pub fn rc_code(e: &RcError) -> c_int {
    DYNRES_ERR_RC + c_int::from(e.code())
}

impl CapiError {
    /// The code the C caller sees.
    pub fn code(&self) -> c_int {
        match self {
            CapiError::Null(_) => DYNRES_ERR_NULL,
            CapiError::TooSmall { .. } => DYNRES_ERR_BUFFER_TOO_SMALL,
            CapiError::InvalidArgument(_) => DYNRES_ERR_INVALID_ARGUMENT,
            CapiError::Name(_) => DYNRES_ERR_BAD_NAME,
            CapiError::Wire(w) => wire_code(w),
            CapiError::Rc(e) => rc_code(e),
            CapiError::Pset(PsetError::Name(_)) => DYNRES_ERR_BAD_NAME,
            CapiError::Pset(_) => DYNRES_ERR_RC_PSET,
            CapiError::Client(c) => match c {
                ClientError::Env(_) => DYNRES_ERR_ENV,
                ClientError::Io(_) => DYNRES_ERR_IO,
                ClientError::Refused => DYNRES_ERR_CONNECTION_REFUSED,
                ClientError::Wire(w) => wire_code(w),
                ClientError::Rc(e) => rc_code(e),
                ClientError::Unexpected(_) => DYNRES_ERR_UNEXPECTED,
            },
            CapiError::Panic(_) => DYNRES_ERR_PANIC,
            CapiError::Poisoned(_) => DYNRES_ERR_POISONED,
        }
    }
}

/// What an entry point's body returns.
pub type CapiResult = Result<(), CapiError>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `e` as this thread's last error and returns its code.
pub fn fail(e: &CapiError) -> c_int {
    let text = e.to_string().replace('\0', "\\0");
    let text = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = text);
    e.code()
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// Runs an entry point's body: no panic crosses the boundary, errors become codes and
/// this thread's last-error message.
pub fn guard(body: impl FnOnce() -> CapiResult) -> c_int {
    guard_inner(body).0
}

/// [`guard`], also telling whether the body panicked (so [`guard_handle`] can poison).
fn guard_inner(body: impl FnOnce() -> CapiResult) -> (c_int, bool) {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => (DYNRES_OK, false),
        Ok(Err(e)) => (fail(&e), false),
        Err(p) => (fail(&CapiError::Panic(panic_text(p.as_ref()))), true),
    }
}

/// A handle that a panic inside it leaves unusable.
pub trait Poison {
    /// The handle's kind, for messages (`"dynres_master"`).
    const WHAT: &'static str;
    /// Its poisoned flag.
    fn poisoned(&mut self) -> &mut bool;
}

/// Runs `body` on the handle behind `ptr`: NULL is [`DYNRES_ERR_NULL`], a poisoned
/// handle [`DYNRES_ERR_POISONED`], and a panic poisons it.
///
/// # Safety
/// `ptr` is NULL or a live handle of this type that no other thread uses meanwhile.
pub unsafe fn guard_handle<H: Poison>(
    ptr: *mut H,
    body: impl FnOnce(&mut H) -> CapiResult,
) -> c_int {
    // SAFETY: the caller promises a live, unshared handle or NULL.
    let Some(h) = (unsafe { ptr.as_mut() }) else {
        return fail(&CapiError::Null(H::WHAT));
    };
    if *h.poisoned() {
        return fail(&CapiError::Poisoned(H::WHAT));
    }
    let (code, panicked) = guard_inner(|| body(&mut *h));
    if panicked {
        *h.poisoned() = true;
    }
    code
}

/// A constructor: boxes what `make` builds and stores the pointer in `*out` (untouched
/// on failure).
///
/// # Safety
/// `out` is NULL or writable.
pub unsafe fn create_handle<H>(
    out: *mut *mut H,
    make: impl FnOnce() -> Result<H, CapiError>,
) -> c_int {
    guard(|| {
        crate::types::need(out, "out")?;
        let h = Box::new(make()?);
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { crate::types::put(out, Box::into_raw(h), "out") }
    })
}

/// A destructor: frees a handle from [`create_handle`]; NULL is a no-op.
///
/// # Safety
/// `h` is NULL or a live handle from [`create_handle`] not freed before.
pub unsafe fn free_handle<H>(h: *mut H) -> c_int {
    guard(|| {
        if !h.is_null() {
            // SAFETY: from Box::into_raw in create_handle, freed once.
            drop(unsafe { Box::from_raw(h) });
        }
        Ok(())
    })
}

/// The message of the last error on the calling thread, NUL-terminated UTF-8 (empty if
/// no call on this thread has failed yet).
///
/// Ownership: the string belongs to the library. It stays valid until the next dynres
/// call that fails on the same thread; copy it to keep it. Successful calls leave it as
/// it was. Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn dynres_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// The name of an error code (`"DYNRES_ERR_NULL"`, `"DYNRES_ERR_RC_TIMEOUT"`, …), or
/// `"DYNRES_ERR_UNKNOWN"` for a code this library does not define.
///
/// Ownership: a static string; never NULL, never to be freed.
#[unsafe(no_mangle)]
pub extern "C" fn dynres_error_name(code: c_int) -> *const c_char {
    error_name(code).as_ptr()
}

fn error_name(code: c_int) -> &'static std::ffi::CStr {
    match code {
        DYNRES_OK => c"DYNRES_OK",
        DYNRES_ERR_NULL => c"DYNRES_ERR_NULL",
        DYNRES_ERR_BUFFER_TOO_SMALL => c"DYNRES_ERR_BUFFER_TOO_SMALL",
        DYNRES_ERR_INVALID_ARGUMENT => c"DYNRES_ERR_INVALID_ARGUMENT",
        DYNRES_ERR_BAD_NAME => c"DYNRES_ERR_BAD_NAME",
        DYNRES_ERR_PANIC => c"DYNRES_ERR_PANIC",
        DYNRES_ERR_POISONED => c"DYNRES_ERR_POISONED",
        DYNRES_ERR_ENV => c"DYNRES_ERR_ENV",
        DYNRES_ERR_IO => c"DYNRES_ERR_IO",
        DYNRES_ERR_CONNECTION_REFUSED => c"DYNRES_ERR_CONNECTION_REFUSED",
        DYNRES_ERR_UNEXPECTED => c"DYNRES_ERR_UNEXPECTED",
        DYNRES_ERR_WIRE_BAD_MAGIC => c"DYNRES_ERR_WIRE_BAD_MAGIC",
        DYNRES_ERR_WIRE_UNKNOWN_VERSION => c"DYNRES_ERR_WIRE_UNKNOWN_VERSION",
        DYNRES_ERR_WIRE_UNKNOWN_TYPE => c"DYNRES_ERR_WIRE_UNKNOWN_TYPE",
        DYNRES_ERR_WIRE_TRUNCATED => c"DYNRES_ERR_WIRE_TRUNCATED",
        DYNRES_ERR_WIRE_LENGTH_MISMATCH => c"DYNRES_ERR_WIRE_LENGTH_MISMATCH",
        DYNRES_ERR_WIRE_TRAILING_BYTES => c"DYNRES_ERR_WIRE_TRAILING_BYTES",
        DYNRES_ERR_WIRE_NOT_UTF8 => c"DYNRES_ERR_WIRE_NOT_UTF8",
        DYNRES_ERR_WIRE_OVER_LIMIT => c"DYNRES_ERR_WIRE_OVER_LIMIT",
        DYNRES_ERR_WIRE_INVALID_VALUE => c"DYNRES_ERR_WIRE_INVALID_VALUE",
        DYNRES_ERR_WIRE_CHECKSUM => c"DYNRES_ERR_WIRE_CHECKSUM",
        DYNRES_ERR_RC_PSET => c"DYNRES_ERR_RC_PSET",
        DYNRES_ERR_RC_SLOTS => c"DYNRES_ERR_RC_SLOTS",
        DYNRES_ERR_RC_BAD_REQUEST => c"DYNRES_ERR_RC_BAD_REQUEST",
        DYNRES_ERR_RC_NO_SUCH_CHANGE => c"DYNRES_ERR_RC_NO_SUCH_CHANGE",
        DYNRES_ERR_RC_ABORTED => c"DYNRES_ERR_RC_ABORTED",
        DYNRES_ERR_RC_ALREADY_FINALIZED => c"DYNRES_ERR_RC_ALREADY_FINALIZED",
        DYNRES_ERR_RC_NOT_BOUND => c"DYNRES_ERR_RC_NOT_BOUND",
        DYNRES_ERR_RC_NEW_PSET_MISMATCH => c"DYNRES_ERR_RC_NEW_PSET_MISMATCH",
        DYNRES_ERR_RC_QUEUE_FULL => c"DYNRES_ERR_RC_QUEUE_FULL",
        DYNRES_ERR_RC_RESERVED_KEY => c"DYNRES_ERR_RC_RESERVED_KEY",
        DYNRES_ERR_RC_KEY_EXISTS => c"DYNRES_ERR_RC_KEY_EXISTS",
        DYNRES_ERR_RC_NO_SUCH_KEY => c"DYNRES_ERR_RC_NO_SUCH_KEY",
        DYNRES_ERR_RC_TIMEOUT => c"DYNRES_ERR_RC_TIMEOUT",
        DYNRES_ERR_RC_NOT_PERMITTED => c"DYNRES_ERR_RC_NOT_PERMITTED",
        DYNRES_ERR_RC_CLIENT => c"DYNRES_ERR_RC_CLIENT",
        DYNRES_ERR_RC_PROCESS_LOST => c"DYNRES_ERR_RC_PROCESS_LOST",
        DYNRES_ERR_RC_STALE => c"DYNRES_ERR_RC_STALE",
        DYNRES_ERR_RC_NOT_GRANTED => c"DYNRES_ERR_RC_NOT_GRANTED",
        _ => c"DYNRES_ERR_UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Toy {
        poisoned: bool,
    }

    impl Poison for Toy {
        const WHAT: &'static str = "toy";
        fn poisoned(&mut self) -> &mut bool {
            &mut self.poisoned
        }
    }

    fn last() -> String {
        // SAFETY: dynres_last_error never returns NULL and its string is NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(dynres_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_code_and_poisons_the_handle() {
        let mut t = Toy { poisoned: false };
        // SAFETY: `t` is live and used by this thread only.
        let code = unsafe { guard_handle(&mut t, |_| panic!("boom")) };
        assert_eq!(code, DYNRES_ERR_PANIC);
        assert!(last().contains("boom"), "{}", last());
        assert!(t.poisoned);
        // SAFETY: as above.
        let code = unsafe { guard_handle(&mut t, |_| Ok(())) };
        assert_eq!(code, DYNRES_ERR_POISONED);
        assert_eq!(guard(|| panic!("{}", 42)), DYNRES_ERR_PANIC);
        assert!(last().contains("42"));
    }

    #[test]
    fn null_handles_and_names() {
        // SAFETY: NULL is allowed.
        let code = unsafe { guard_handle(std::ptr::null_mut::<Toy>(), |_| Ok(())) };
        assert_eq!(code, DYNRES_ERR_NULL);
        assert_eq!(last(), "toy is NULL");
        let name = |c| error_name(c).to_str().unwrap();
        assert_eq!(name(DYNRES_ERR_RC_TIMEOUT), "DYNRES_ERR_RC_TIMEOUT");
        assert_eq!(name(-7), "DYNRES_ERR_UNKNOWN");
        assert_eq!(rc_code(&RcError::Timeout), DYNRES_ERR_RC_TIMEOUT);
        assert_eq!(
            rc_code(&RcError::Client("x")),
            DYNRES_ERR_RC_CLIENT,
            "codes follow core's RcError::code"
        );
    }
}
