//! The host's calibrations (the shared-memory spin budget, the TCP spin budget, whether
//! single-copy transfers pay), measured by the first runtime of a boot and kept in the
//! runtime directory for the next ones.
//!
//! Measuring them costs a runtime 3–12 ms on the 2-core VM (a futex ping-pong, a poll
//! ping-pong, five 1 MiB copies), all of it before the first rank starts: about half of
//! `dynres run -n 16 -- /bin/true` (issue 29). They describe the host, not the job, so
//! every later job of the same boot reads `.calibration` (a dot name: tools skip it
//! when they list jobs) instead, until it is [`MAX_AGE`] old.
//! `DYNRES_CALIBRATE=1` measures again (and rewrites the file); a variable that
//! overrides one value (`DYNRES_SHM_SPINS`, `DYNRES_TCP_SPIN_US`, `DYNRES_SHM_CMA`)
//! still wins over the file, as it wins over a measurement.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::procs::Calibration;

/// The file's name in the runtime directory.
pub const FILE: &str = ".calibration";
/// After this, a runtime measures again: a host's load (and so its wake-up costs) may
/// have changed since.
pub const MAX_AGE: Duration = Duration::from_secs(3600);
/// `DYNRES_CALIBRATE=1`: measure even if the file is fresh.
pub const CALIBRATE_ENV: &str = "DYNRES_CALIBRATE";
/// The file is one short line; anything longer is not ours.
const MAX_LEN: u64 = 512;
/// First word of the line: a change of format makes old files stale.
const VERSION: &str = "dynres-calibration-1";

/// What a runtime gives its processes: the shared-memory spin budget and the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCalibration {
    /// `DYNRES_SHM_SPINS`.
    pub shm_spins: u32,
    /// The TCP spin budget and whether single copy pays.
    pub calibration: Calibration,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `VERSION boot=ID at=SECS shm_spins=N tcp_spin_ns=N cma=0|1`.
fn encode(c: &HostCalibration, boot: &str, at: u64) -> String {
    format!(
        "{VERSION} boot={boot} at={at} shm_spins={} tcp_spin_ns={} cma={}\n",
        c.shm_spins,
        c.calibration.tcp_spin.as_nanos(),
        u8::from(c.calibration.cma_pays)
    )
}

/// The calibration in `text` if it is of this format, this boot, and not older than
/// [`MAX_AGE`] at `now` (nor from the future).
fn decode(text: &str, boot: &str, now: u64) -> Option<HostCalibration> {
    let mut words = text.split_whitespace();
    if words.next()? != VERSION || boot.is_empty() {
        return None;
    }
    let mut get = |key: &str| words.next()?.strip_prefix(key).map(str::to_string);
    let file_boot = get("boot=")?;
    let at: u64 = get("at=")?.parse().ok()?;
    let shm_spins: u32 = get("shm_spins=")?.parse().ok()?;
    let tcp_ns: u64 = get("tcp_spin_ns=")?.parse().ok()?;
    let cma_pays = match get("cma=")?.as_str() {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    let fresh = at <= now && now - at <= MAX_AGE.as_secs();
    (file_boot == boot && fresh).then_some(HostCalibration {
        shm_spins,
        calibration: Calibration {
            tcp_spin: Duration::from_nanos(tcp_ns),
            cma_pays,
        },
    })
}

fn measure() -> HostCalibration {
    HostCalibration {
        shm_spins: dynres_transports::shm::waiter::calibrated_spins(),
        calibration: Calibration::measure(),
    }
}

/// The host's calibration: from `root/.calibration` if it is fresh, else measured and
/// written there for the next runtime. `root` is the runtime directory, already
/// checked to be ours (`crate::private`). A file that cannot be read or written only
/// costs the measurement.
pub fn host(root: &Path) -> HostCalibration {
    let path = root.join(FILE);
    let boot = boot_id();
    let forced = std::env::var(CALIBRATE_ENV).is_ok_and(|v| v == "1");
    let cached = if forced {
        None
    } else {
        crate::private::read_file(&path, MAX_LEN)
            .ok()
            .and_then(|t| decode(&t, &boot, now_secs()))
    };
    let mut c = match cached {
        Some(c) => {
            tracing::debug!(?c, "host calibration from {}", path.display());
            c
        }
        None => {
            let c = measure();
            if !boot.is_empty() {
                if let Err(e) = store(root, &encode(&c, &boot, now_secs())) {
                    tracing::debug!(error = %e, "cannot keep the host calibration");
                }
            }
            c
        }
    };
    // A user's DYNRES_SHM_SPINS wins over the file as over a measurement (the others
    // are filtered where the variables are set, `Calibration::env`).
    if std::env::var_os("DYNRES_SHM_SPINS").is_some() {
        c.shm_spins = dynres_transports::shm::waiter::calibrated_spins();
    }
    c
}

/// Writes `line` to `root/.calibration` through a private temporary file and a rename,
/// so a concurrent runtime reads the old file or the new one, never half of one.
fn store(root: &Path, line: &str) -> std::io::Result<()> {
    let tmp = root.join(format!(".calibration.{}.new", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, root.join(FILE)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HostCalibration {
        HostCalibration {
            shm_spins: 1234,
            calibration: Calibration {
                tcp_spin: Duration::from_micros(31),
                cma_pays: true,
            },
        }
    }

    #[test]
    fn a_fresh_line_of_this_boot_round_trips() {
        let line = encode(&sample(), "b00t", 1000);
        assert_eq!(decode(&line, "b00t", 1000 + 60), Some(sample()));
    }

    #[test]
    fn another_boot_an_old_line_or_garbage_is_measured_again() {
        let line = encode(&sample(), "b00t", 1000);
        assert_eq!(decode(&line, "other", 1000), None, "another boot");
        let late = 1000 + MAX_AGE.as_secs() + 1;
        assert_eq!(decode(&line, "b00t", late), None, "too old");
        assert_eq!(decode(&line, "b00t", 999), None, "from the future");
        assert_eq!(decode(&line, "", 1000), None, "no boot id here");
        assert_eq!(decode("dynres-calibration-1 boot=b00t", "b00t", 1000), None);
        assert_eq!(decode("GET / HTTP/1.1", "b00t", 1000), None);
        let bad_cma = line.replace("cma=1", "cma=2");
        assert_eq!(decode(&bad_cma, "b00t", 1000), None);
    }

    #[test]
    fn the_second_runtime_reads_what_the_first_measured() {
        let dir = std::env::temp_dir().join(format!("dynres-calib-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::private::ensure_dir(&dir).unwrap();
        let line = encode(&sample(), &boot_id(), now_secs());
        store(&dir, &line).unwrap();
        if !boot_id().is_empty() && std::env::var_os("DYNRES_SHM_SPINS").is_none() {
            assert_eq!(host(&dir), sample());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
