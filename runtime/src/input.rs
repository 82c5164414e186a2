//! Files the launcher reads because a user named them (a hostfile) or because they sit
//! in its runtime directory (a job's `secret`, its `pid`): read only if they are
//! regular files, and only up to a limit. `--hostfile /dev/zero` would otherwise grow
//! the launcher by hundreds of MB a second, and a FIFO would hang it on `open` or
//! `read`; each is refused at once with one line naming the path.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Most bytes of a hostfile: a million hosts' worth of names would not fit, and a job
/// that big has no use for one anyway.
pub const MAX_HOSTFILE: u64 = 1 << 20;

/// A file that was not read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct InputError {
    /// The file as named.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a file the launcher would read.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// It cannot be opened or read.
    #[error("{0}")]
    Io(std::io::Error),
    /// A FIFO, a device, a socket, a directory: reading it may never end or block.
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    /// It holds more than the limit.
    #[error("is larger than the limit of {0} bytes")]
    TooLarge(u64),
    /// It is not text.
    #[error("is not UTF-8 text")]
    NotText,
}

/// What kind of file `t` is, in words.
pub fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// Opens `path` for reading, with `flags` added to `O_NONBLOCK` (so that opening a
/// FIFO returns at once instead of waiting for a writer), and checks on the open file
/// that it is a regular file.
pub fn open_regular(path: &Path, flags: i32) -> Result<File, InputError> {
    let fail = |problem| InputError {
        path: path.to_path_buf(),
        problem,
    };
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)
        .map_err(|e| fail(Problem::Io(e)))?;
    let t = f.metadata().map_err(|e| fail(Problem::Io(e)))?.file_type();
    if !t.is_file() {
        return Err(fail(Problem::NotRegular(kind_of(t))));
    }
    Ok(f)
}

/// Reads all of `from` (the file `path`) as text, refusing more than `limit` bytes;
/// never holds more than `limit` + 1 bytes, whatever the file claims its size is.
pub fn read_bounded(path: &Path, from: impl Read, limit: u64) -> Result<String, InputError> {
    let fail = |problem| InputError {
        path: path.to_path_buf(),
        problem,
    };
    let mut bytes = Vec::new();
    from.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| fail(Problem::Io(e)))?;
    if bytes.len() as u64 > limit {
        return Err(fail(Problem::TooLarge(limit)));
    }
    String::from_utf8(bytes).map_err(|_| fail(Problem::NotText))
}

/// Reads the regular file `path` (symbolic links followed) as text, at most `limit`
/// bytes of it.
pub fn read_regular(path: &Path, limit: u64) -> Result<String, InputError> {
    read_bounded(path, open_regular(path, 0)?, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dynres-input-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn problem(r: Result<String, InputError>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn a_device_is_refused_before_anything_is_read() {
        assert_eq!(
            problem(read_regular(Path::new("/dev/zero"), MAX_HOSTFILE)),
            "/dev/zero: is a character device, not a regular file"
        );
    }

    /// Opening a FIFO without a writer blocks forever without `O_NONBLOCK`: this test
    /// hangs on the old code instead of failing.
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let d = scratch("fifo");
        let fifo = d.join("hosts");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            problem(read_regular(&fifo, MAX_HOSTFILE)),
            format!("{}: is a FIFO, not a regular file", fifo.display())
        );
        assert!(problem(read_regular(&d, 10)).ends_with("is a directory, not a regular file"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_over_the_limit_is_refused_with_the_limit() {
        let d = scratch("big");
        let f = d.join("hosts");
        std::fs::write(&f, "h1\n".repeat(100)).unwrap();
        assert_eq!(read_regular(&f, 300).unwrap().lines().count(), 100);
        assert_eq!(
            problem(read_regular(&f, 299)),
            format!("{}: is larger than the limit of 299 bytes", f.display())
        );
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(problem(read_regular(&f, 10)).ends_with("is not UTF-8 text"));
        // A regular file whose size says nothing of its content is bounded all the
        // same (procfs files have size 0).
        let endless = std::io::repeat(b'x');
        assert!(matches!(
            read_bounded(&f, endless, 1000),
            Err(InputError {
                problem: Problem::TooLarge(1000),
                ..
            })
        ));
        let _ = std::fs::remove_dir_all(&d);
    }
}
