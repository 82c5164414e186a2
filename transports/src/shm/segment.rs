//! POSIX shared-memory segments: create/open/map, unlink on drop (owner) and reaping of
//! segments whose owner died (so a crash never leaks `/dev/shm` space for long).

use std::ffi::CString;
use std::ptr::NonNull;

use crate::error::{Result, TransportError};

/// Every segment this crate creates starts with this (in `/dev/shm`).
pub const SEGMENT_PREFIX: &str = "dynres-shm-";

/// A mapped segment.
pub struct Segment {
    name: String,
    ptr: NonNull<u8>,
    len: usize,
    owner: bool,
}

// SAFETY: the mapping is plain shared bytes; access discipline is the users' (rings,
// atomics), and the pointer stays valid until drop wherever the value moves.
unsafe impl Send for Segment {}

fn c_name(name: &str) -> Result<CString> {
    CString::new(format!("/{name}")).map_err(|_| TransportError::BadSegment {
        name: name.to_owned(),
        reason: "name contains NUL",
    })
}

impl Segment {
    /// Creates (exclusively) and maps a zero-filled segment of `len` bytes.
    pub fn create(name: &str, len: usize) -> Result<Self> {
        let c = c_name(name)?;
        // SAFETY: `c` is a valid C string; flags and mode are plain integers.
        let fd = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(TransportError::io(
                format!("shm_open create {name}"),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` was just opened by us.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing and unlinking what we just created.
            unsafe {
                libc::close(fd);
                libc::shm_unlink(c.as_ptr());
            }
            return Err(TransportError::io(format!("ftruncate {name}"), e));
        }
        let seg = Self::map(name, fd, len, true);
        if seg.is_err() {
            // SAFETY: unlinking the name we created.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
        seg
    }

    /// Opens and maps an existing segment.
    pub fn open(name: &str) -> Result<Self> {
        let c = c_name(name)?;
        // SAFETY: valid C string.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(TransportError::io(
                format!("shm_open {name}"),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: zeroed stat is a valid out-parameter; `fd` is open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: our fd.
            unsafe { libc::close(fd) };
            return Err(TransportError::io(format!("fstat {name}"), e));
        }
        Self::map(name, fd, st.st_size as usize, false)
    }

    fn map(name: &str, fd: libc::c_int, len: usize, owner: bool) -> Result<Self> {
        // SAFETY: mapping `len` bytes of an open shm fd, shared, read-write.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        let err = std::io::Error::last_os_error();
        // SAFETY: the mapping (if any) keeps the object alive; the fd is no longer needed.
        unsafe { libc::close(fd) };
        if p == libc::MAP_FAILED {
            return Err(TransportError::io(format!("mmap {name}"), err));
        }
        Ok(Self {
            name: name.to_owned(),
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            owner,
        })
    }

    /// Segment name (without the leading slash).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Start of the mapping.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; nothing refers to it any more
        // (users hold the Segment alongside the pointers derived from it).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if self.owner {
            unlink(&self.name);
        }
    }
}

/// Removes a segment name (no-op if already gone).
pub fn unlink(name: &str) {
    if let Ok(c) = c_name(name) {
        // SAFETY: valid C string; failure (already unlinked) is harmless.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

/// Whether process `pid` is alive (a zombie counts as dead: it will never run again).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks existence and permission.
    if unsafe { libc::kill(p, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the last ')' (the command name may contain spaces).
        Ok(s) => !matches!(
            s.rsplit_once(')')
                .and_then(|(_, r)| r.trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => false,
    }
}

/// The owner pid encoded in a segment name `dynres-shm-{pid}-{n}`.
pub fn owner_of(name: &str) -> Option<u32> {
    name.strip_prefix(SEGMENT_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// Unlinks every segment of ours in `/dev/shm` whose owner is dead (left by a crash).
/// Returns how many were removed.
pub fn reap_stale() -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = owner_of(&name) {
            if !pid_alive(pid) {
                tracing::info!(segment = %name, pid, "reaping segment of dead process");
                unlink(&name);
                n += 1;
            }
        }
    }
    n
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn create_open_share_and_unlink_on_drop() {
        let name = format!("{SEGMENT_PREFIX}{}-test-seg", std::process::id());
        let a = Segment::create(&name, 4096).unwrap();
        assert!(Segment::create(&name, 4096).is_err(), "exclusive create");
        let b = Segment::open(&name).unwrap();
        assert_eq!(b.len(), 4096);
        // SAFETY: both map the same 4096 bytes; single thread.
        unsafe {
            a.ptr().as_ptr().write(42);
            assert_eq!(b.ptr().as_ptr().read(), 42);
        }
        drop(a);
        assert!(!std::path::Path::new("/dev/shm").join(&name).exists());
        drop(b);
        assert!(Segment::open(&name).is_err());
    }

    #[test]
    fn liveness_and_names() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX));
        assert_eq!(owner_of("dynres-shm-123-4"), Some(123));
        assert_eq!(owner_of("other-123"), None);
    }
}
