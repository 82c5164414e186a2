//! How the ranks' output is shown (`dynres run --tag-output`, `--timestamp-output`,
//! `--output-filename DIR`): each line of a rank's stdout or stderr, as the I/O loop read
//! it, goes to the runtime's own stdout or stderr with a `[rank N] ` tag (the default)
//! and, if asked, the time since the job started; or, with an output directory, into
//! `DIR/rank.N/stdout` and `DIR/rank.N/stderr` (as Open MPI's `--output-filename`,
//! without its job level: one job per directory).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What `dynres run` asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputStyle {
    /// `[rank N] ` before each line (`--tag-output`, the default; `--no-tag-output`).
    pub tag: bool,
    /// `[+S.mmm] ` before each line: seconds since the job started
    /// (`--timestamp-output`).
    pub timestamp: bool,
    /// One file per rank and stream under this directory instead of the terminal.
    pub dir: Option<PathBuf>,
}

impl Default for OutputStyle {
    fn default() -> Self {
        OutputStyle {
            tag: true,
            timestamp: false,
            dir: None,
        }
    }
}

/// Where the writer thread puts lines: the terminal or per-rank files.
pub struct Sink {
    style: OutputStyle,
    start: Instant,
    files: HashMap<(u32, bool), File>,
    /// Ranks whose file could not be made: their lines go to the terminal (said once).
    failed: HashMap<u32, ()>,
}

impl Sink {
    /// A sink for `style`, timing from now.
    pub fn new(style: OutputStyle) -> Sink {
        Sink {
            style,
            start: Instant::now(),
            files: HashMap::new(),
            failed: HashMap::new(),
        }
    }

    /// The line as shown: prefixes, and a newline at its end.
    pub fn format(&self, rank: u32, line: &[u8]) -> Vec<u8> {
        let mut buf = Vec::with_capacity(line.len() + 24);
        if self.style.timestamp {
            let t = self.start.elapsed();
            let _ = write!(buf, "[+{}.{:03}] ", t.as_secs(), t.subsec_millis());
        }
        if self.style.tag {
            let _ = write!(buf, "[rank {rank}] ");
        }
        buf.extend_from_slice(line);
        if buf.last() != Some(&b'\n') {
            buf.push(b'\n');
        }
        buf
    }

    /// Writes one line of `rank`'s stdout (or stderr). Errors are dropped: the job's
    /// output must never stop the job.
    pub fn write(&mut self, rank: u32, to_stderr: bool, line: &[u8]) {
        let text = self.format(rank, line);
        if let Some(dir) = self.style.dir.clone() {
            if !self.failed.contains_key(&rank) {
                match self.file(&dir, rank, to_stderr) {
                    Ok(f) => {
                        let _ = f.write_all(&text);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(
                            "cannot write rank {rank}'s output under {}: {e}; to the terminal instead",
                            dir.display()
                        );
                        self.failed.insert(rank, ());
                    }
                }
            }
        }
        let _ = if to_stderr {
            std::io::stderr().lock().write_all(&text)
        } else {
            std::io::stdout().lock().write_all(&text)
        };
    }

    fn file(&mut self, dir: &Path, rank: u32, to_stderr: bool) -> std::io::Result<&mut File> {
        match self.files.entry((rank, to_stderr)) {
            std::collections::hash_map::Entry::Occupied(f) => Ok(f.into_mut()),
            std::collections::hash_map::Entry::Vacant(v) => {
                let d = dir.join(format!("rank.{rank}"));
                std::fs::create_dir_all(&d)?;
                let name = if to_stderr { "stderr" } else { "stdout" };
                Ok(v.insert(File::create(d.join(name))?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_tagged_timestamped_and_ended() {
        let s = Sink::new(OutputStyle::default());
        assert_eq!(s.format(3, b"hi\n"), b"[rank 3] hi\n");
        assert_eq!(s.format(3, b"no newline"), b"[rank 3] no newline\n");
        let bare = Sink::new(OutputStyle {
            tag: false,
            ..OutputStyle::default()
        });
        assert_eq!(bare.format(3, b"hi\n"), b"hi\n");
        let timed = Sink::new(OutputStyle {
            timestamp: true,
            ..OutputStyle::default()
        });
        let line = String::from_utf8(timed.format(0, b"x\n")).unwrap();
        assert!(
            line.starts_with("[+0.") && line.ends_with("] [rank 0] x\n"),
            "{line}"
        );
    }

    #[test]
    fn an_output_directory_gets_one_file_per_rank_and_stream() {
        let dir = std::env::temp_dir().join(format!("dynres-output-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut s = Sink::new(OutputStyle {
            tag: false,
            timestamp: false,
            dir: Some(dir.clone()),
        });
        s.write(0, false, b"out 0\n");
        s.write(1, true, b"err 1\n");
        s.write(0, false, b"again\n");
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("rank.0/stdout"), "out 0\nagain\n");
        assert_eq!(read("rank.1/stderr"), "err 1\n");
        assert!(!dir.join("rank.1/stdout").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
