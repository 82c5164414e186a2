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

/// How many fresh names [`Segment::create_unique`] tries before giving up. With 64
/// random bits a collision with an honest segment is negligible, so needing more than
/// one retry already means someone is creating our names on purpose.
pub const CREATE_ATTEMPTS: u32 = 8;

/// A fresh segment name for this process: `dynres-shm-{pid}-{16 random hex digits}`.
/// The pid keeps [`owner_of`] (and so [`reap_stale`] and the launcher's sweep of a dead
/// process' segments) working; the random part makes the name unpredictable, so
/// another local user cannot create it first and make us fail or use their segment.
pub fn unique_name() -> Result<String> {
    Ok(format!(
        "{SEGMENT_PREFIX}{}-{:016x}",
        std::process::id(),
        random_u64()?
    ))
}

/// 64 bits from the kernel's CSPRNG (`getrandom(2)`, which never returns short for 8
/// bytes once the pool is initialised; interrupted calls are retried).
pub(crate) fn random_u64() -> Result<u64> {
    let mut b = [0u8; 8];
    loop {
        // SAFETY: writes at most `b.len()` bytes into `b`.
        let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        if n == b.len() as isize {
            return Ok(u64::from_ne_bytes(b));
        }
        let e = std::io::Error::last_os_error();
        if n < 0 && e.kind() != std::io::ErrorKind::Interrupted {
            return Err(TransportError::io("getrandom", e));
        }
    }
}

impl Segment {
    /// Creates (exclusively, mode 0600) and maps a zero-filled segment of `len` bytes.
    pub fn create(name: &str, len: usize) -> Result<Self> {
        Self::try_create(name, len)?.ok_or_else(|| {
            TransportError::io(
                format!("shm_open create {name}"),
                std::io::Error::from_raw_os_error(libc::EEXIST),
            )
        })
    }

    /// Creates and maps a segment of `len` bytes under a fresh [`unique_name`].
    pub fn create_unique(len: usize) -> Result<Self> {
        Self::create_unique_with(len, unique_name)
    }

    /// Creates a segment under the first name from `next_name` that does not exist yet,
    /// trying at most [`CREATE_ATTEMPTS`] names. An existing name is never opened (it
    /// may be someone else's, planted there): `O_EXCL` makes the create fail and we
    /// move on to the next name.
    pub fn create_unique_with(
        len: usize,
        mut next_name: impl FnMut() -> Result<String>,
    ) -> Result<Self> {
        let mut last = String::new();
        for _ in 0..CREATE_ATTEMPTS {
            last = next_name()?;
            if let Some(seg) = Self::try_create(&last, len)? {
                return Ok(seg);
            }
            tracing::warn!(segment = %last, "shm segment name already exists; trying another");
        }
        Err(TransportError::SegmentNamesExhausted {
            attempts: CREATE_ATTEMPTS,
            last,
        })
    }

    /// [`Segment::create`], with `None` if the name exists already.
    fn try_create(name: &str, len: usize) -> Result<Option<Self>> {
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
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                return Ok(None);
            }
            return Err(TransportError::io(format!("shm_open create {name}"), e));
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
        seg.map(Some)
    }

    /// Opens and maps an existing segment, refusing one that is not owned by our
    /// effective uid or that group or others may access: such a segment was not made by
    /// a process of this job (ours are created 0600), and mapping it would let its
    /// owner feed us arbitrary rings.
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
        let refusal = if unsafe { libc::fstat(fd, &mut st) } != 0 {
            Some(TransportError::io(
                format!("fstat {name}"),
                std::io::Error::last_os_error(),
            ))
        } else {
            check_trusted(name, &st)
        };
        if let Some(e) = refusal {
            // SAFETY: our fd.
            unsafe { libc::close(fd) };
            return Err(e);
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

    /// Whether dropping this value unlinks the name (we created it and still own it).
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// Hands the duty of unlinking the name to someone else: a sender that created an
    /// inbox extension ([`super::layout`]) gives it to the inbox's owner once it is
    /// published, so the extension outlives the sender's own mapping.
    pub fn disown(&mut self) {
        self.owner = false;
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

/// Why a segment we did not create must not be mapped, if it must not.
fn check_trusted(name: &str, st: &libc::stat) -> Option<TransportError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if st.st_uid != euid {
        return Some(TransportError::SegmentNotOwned {
            name: name.to_owned(),
            owner: st.st_uid,
            euid,
        });
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o077 != 0 {
        return Some(TransportError::SegmentPermissions {
            name: name.to_owned(),
            mode,
        });
    }
    None
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

/// The owner pid encoded in a segment name `dynres-shm-{pid}-{suffix}`.
pub fn owner_of(name: &str) -> Option<u32> {
    name.strip_prefix(SEGMENT_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// `DYNRES_SHM_REAPED=1`: a runtime that started this process sweeps `/dev/shm`
/// itself (once per job, and the segments of every rank that did not exit cleanly), so
/// [`super::ShmDevice::new`] skips [`reap_stale`]. Every process of a job scanning every
/// segment of the host, with a `/proc` read per live owner, cost each one O(segments on
/// the host) at start-up: 60 ms per process on a shared 2-core VM with 1346 segments of
/// other users' jobs (issue 29).
pub const REAPED_ENV: &str = "DYNRES_SHM_REAPED";

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
    use crate::shm::layout::Inbox;
    use std::path::Path;

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
        assert_eq!(owner_of("dynres-shm-123-00ff00ff00ff00ff"), Some(123));
        assert_eq!(owner_of("other-123"), None);
    }

    #[test]
    fn unique_names_keep_the_pid_and_are_unpredictable() {
        let (a, b) = (unique_name().unwrap(), unique_name().unwrap());
        assert_ne!(a, b);
        let prefix = format!("{SEGMENT_PREFIX}{}-", std::process::id());
        for n in [&a, &b] {
            let suffix = n
                .strip_prefix(&prefix)
                .expect("pid prefix the sweeps match");
            assert_eq!(suffix.len(), 16);
            assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
            assert_eq!(owner_of(n), Some(std::process::id()));
        }
    }

    /// Creates `name` the way another user would squat it: mode `mode`, owned by
    /// `uid` if given. Returns false if the ownership could not be given away (not
    /// root).
    fn plant(name: &str, mode: libc::mode_t, uid: Option<libc::uid_t>) -> bool {
        let c = c_name(name).unwrap();
        // SAFETY: valid C string; the fd is closed below.
        let fd = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: our fd; fchmod is not subject to the umask.
        let mut ok = unsafe { libc::ftruncate(fd, 4096) == 0 && libc::fchmod(fd, mode) == 0 };
        if let Some(uid) = uid {
            // SAFETY: our fd.
            ok &= unsafe { libc::fchown(fd, uid, uid) } == 0;
        }
        // SAFETY: our fd.
        unsafe { libc::close(fd) };
        ok
    }

    #[test]
    fn squatted_names_are_skipped_and_exhaustion_is_typed() {
        let pid = std::process::id();
        let squatted = format!("{SEGMENT_PREFIX}{pid}-squatted");
        let fresh = format!("{SEGMENT_PREFIX}{pid}-fresh");
        assert!(plant(&squatted, 0o666, None));
        let mut names = [squatted.clone(), fresh.clone()].into_iter();
        let seg = Segment::create_unique_with(8192, || Ok(names.next().unwrap())).unwrap();
        assert_eq!(seg.name(), fresh, "the planted name is passed over");
        let planted = std::fs::metadata(Path::new("/dev/shm").join(&squatted)).unwrap();
        assert_eq!(planted.len(), 4096, "the planted segment is left alone");
        let mut tries = 0;
        let e = Segment::create_unique_with(8192, || {
            tries += 1;
            Ok(squatted.clone())
        })
        .err()
        .expect("every name taken");
        assert!(
            matches!(e, TransportError::SegmentNamesExhausted { attempts, .. } if attempts == CREATE_ATTEMPTS),
            "{e}"
        );
        assert_eq!(tries, CREATE_ATTEMPTS);
        unlink(&squatted);
    }

    #[test]
    fn foreign_or_open_segments_are_refused() {
        let pid = std::process::id();
        let open = format!("{SEGMENT_PREFIX}{pid}-mode0666");
        assert!(plant(&open, 0o666, None));
        let e = Segment::open(&open).err().expect("mode 0666 refused");
        assert!(
            matches!(e, TransportError::SegmentPermissions { mode: 0o666, .. }),
            "{e}"
        );
        let e = Inbox::open(&open)
            .err()
            .expect("and not mapped as an inbox");
        assert!(
            matches!(e, TransportError::SegmentPermissions { .. }),
            "{e}"
        );
        unlink(&open);
        let group = format!("{SEGMENT_PREFIX}{pid}-mode0640");
        assert!(plant(&group, 0o640, None));
        assert!(matches!(
            Segment::open(&group),
            Err(TransportError::SegmentPermissions { mode: 0o640, .. })
        ));
        unlink(&group);
        // Another user's segment (uid 65534, "nobody"): only root can make one.
        let foreign = format!("{SEGMENT_PREFIX}{pid}-foreign");
        if plant(&foreign, 0o600, Some(65534)) {
            let e = Segment::open(&foreign)
                .err()
                .expect("foreign owner refused");
            assert!(
                matches!(e, TransportError::SegmentNotOwned { owner: 65534, .. }),
                "{e}"
            );
        } else {
            eprintln!("not root: cannot give a segment to another uid; owner check not run");
        }
        unlink(&foreign);
    }
}
