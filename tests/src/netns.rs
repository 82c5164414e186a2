//! Test hosts for multi-host tests: network namespaces on one L2 segment, each with an
//! sshd, made by `tests/netns/hosts.sh` (see its header). [`Hosts::up`] brings them up
//! (or says why it cannot: not root, no network namespaces), [`Hosts::exec`] runs a
//! command inside one, and dropping the [`Hosts`] takes them down again.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// How long bringing hosts up may take (an apt-get install of openssh-server included).
pub const UP_LIMIT: Duration = Duration::from_secs(900);
/// How long a command run by [`Hosts::exec`] may take.
pub const EXEC_LIMIT: Duration = Duration::from_secs(60);
/// How long taking hosts down may take.
pub const DOWN_LIMIT: Duration = Duration::from_secs(120);
/// Default namespace prefix: hosts are `{prefix}h1..`, the switch `{prefix}sw`.
pub const DEFAULT_PREFIX: &str = "dyt";
/// The hosts' subnet: host `i` is `10.77.0.i`.
pub const SUBNET: &str = "10.77.0";

/// Why a multi-host test cannot run here; prints as `skipped: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped: {}", self.0)
    }
}

/// A set of test hosts, up until dropped.
pub struct Hosts {
    n: usize,
    prefix: String,
    state: PathBuf,
    /// One set of hosts at a time in a test process (see [`SERIAL`]).
    _serial: std::sync::MutexGuard<'static, ()>,
}

/// Held by each [`Hosts`] for its life. Two sets of hosts of one test binary (each
/// with its own prefix) brought up and used at once failed once in a `.ci/run` with
/// daemons that went silent after authenticating, which never happened one at a time
/// (and which the probe's name clash had hidden: one of the two was always skipped).
/// Undiagnosed: the tests run one after the other until it is.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `tests/netns/hosts.sh` of this checkout.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("netns/hosts.sh")
}

/// `cmd` under coreutils' `timeout`, so that nothing a test starts can hang it.
fn bounded(limit: Duration, program: &str) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", &limit.as_secs().max(1).to_string(), program]);
    c.stdin(Stdio::null());
    c
}

/// Whether this process may create network namespaces: `Err` says why not.
pub fn supported() -> Result<(), Skip> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Skip("not root (network namespaces need root)".into()));
    }
    // Unique per call, not only per process: the tests of one binary run on threads
    // at once, and a second probe of the same name failed with "File exists" — that
    // test was then skipped (shown by `.ci/run`'s list of skips).
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = format!("dytprobe{}x{n}", std::process::id());
    let add = bounded(Duration::from_secs(10), "ip")
        .args(["netns", "add", &probe])
        .output();
    match add {
        Err(e) => Err(Skip(format!("cannot run `ip` (iproute2): {e}"))),
        Ok(o) if !o.status.success() => Err(Skip(format!(
            "`ip netns add` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
        Ok(_) => {
            let _ = bounded(Duration::from_secs(10), "ip")
                .args(["netns", "del", &probe])
                .output();
            Ok(())
        }
    }
}

impl Hosts {
    /// Brings up hosts 1..=`n` with the default prefix (`dyt`): `skipped` when this
    /// machine cannot (not root, no network namespaces). Panics with the script's
    /// one-line reason when bringing them up fails for another cause.
    pub fn up(n: usize) -> Result<Hosts, Skip> {
        Hosts::up_with_prefix(DEFAULT_PREFIX, n)
    }

    /// As [`Hosts::up`], with namespace prefix `prefix` (letters and digits: tests that
    /// run at the same time need different ones).
    pub fn up_with_prefix(prefix: &str, n: usize) -> Result<Hosts, Skip> {
        supported()?;
        let state = std::env::temp_dir().join(format!("dynres-netns-{prefix}"));
        // Poisoned by a test that failed while holding it: the hosts are still usable.
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let hosts = Hosts {
            n,
            prefix: prefix.to_string(),
            state,
            _serial: serial,
        };
        let out = hosts
            .script_cmd(UP_LIMIT)
            .args(["up", &n.to_string()])
            .output()
            .expect("run hosts.sh");
        assert!(
            out.status.success(),
            "hosts.sh up {n} failed (exit {:?}): {}",
            out.status.code(),
            last_line(&out.stderr)
        );
        Ok(hosts)
    }

    fn script_cmd(&self, limit: Duration) -> Command {
        let mut c = bounded(limit, "bash");
        c.arg(script())
            .env("NETNS_PREFIX", &self.prefix)
            .env("NETNS_SUBNET", SUBNET)
            .env("NETNS_STATE", &self.state);
        c
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there are no hosts (never, once up).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Host `i`'s address (`10.77.0.i`), 1-based.
    pub fn addr(&self, i: usize) -> String {
        assert!((1..=self.n).contains(&i), "no host {i} of {}", self.n);
        format!("{SUBNET}.{i}")
    }

    /// Host `i`'s network namespace.
    pub fn namespace(&self, i: usize) -> String {
        assert!((1..=self.n).contains(&i), "no host {i} of {}", self.n);
        format!("{}h{i}", self.prefix)
    }

    /// The ssh client config that reaches every host as root by key:
    /// `ssh -F <config> 10.77.0.J CMD` from inside any host.
    pub fn ssh_config(&self) -> PathBuf {
        self.state.join("ssh_config")
    }

    /// Runs `cmd` inside host `i` (1-based), bounded by [`EXEC_LIMIT`].
    pub fn exec(&self, i: usize, cmd: &[&str]) -> Output {
        let ns = self.namespace(i);
        bounded(EXEC_LIMIT, "ip")
            .args(["netns", "exec", &ns])
            .args(cmd)
            .output()
            .expect("run ip netns exec")
    }

    /// Runs `remote` (a shell command line) on host `to` over ssh from host `from`.
    pub fn ssh(&self, from: usize, to: usize, remote: &str) -> Output {
        let config = self.ssh_config().display().to_string();
        let addr = self.addr(to);
        self.exec(from, &["ssh", "-F", &config, &addr, remote])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let failed = match self.script_cmd(DOWN_LIMIT).arg("down").output() {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(last_line(&o.stderr)),
            Err(e) => Some(e.to_string()),
        };
        // Hosts left behind fail the test, unless it is failing already.
        if let Some(why) = failed {
            if !std::thread::panicking() {
                panic!("hosts.sh down failed: {why}");
            }
        }
    }
}

fn last_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .lines()
        .last()
        .unwrap_or("")
        .to_string()
}
