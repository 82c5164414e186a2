//! PMI-2 clients under `dynres run` (`spec/pmi.md` §3.1, PMIS-17..19): a C program
//! built here against Slurm's PMI-2 client library (`libpmi2`, Debian's
//! `libpmi2-0-dev`, which `.ci/slow` installs; the library Intel MPI and MPICH built
//! `--with-pmi=slurm` load), and a bash rank that speaks the PMI-2 wire by hand as a
//! hostile client. Without the library the C tests print `skipped: <reason>`; the
//! hostile-client test needs nothing and always runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dynres_tests::job::{Finished, Runtime};
use dynres_tests::skip::skip;

/// Slurm's PMI-2 header, where `libpmi2-0-dev` puts it.
const HEADER: &str = "/usr/include/slurm/pmi2.h";

const HELLO: &str = include_str!("mpi/pmi2_hello.c");

/// `pmi2_hello.c` built against `libpmi2` into `dir`, or `None` after recording why the
/// calling test is skipped.
fn build_hello(dir: &Path) -> Option<PathBuf> {
    if !Path::new(HEADER).exists() {
        skip(format!(
            "no Slurm PMI-2 client library ({HEADER} missing; `apt-get install libpmi2-0-dev`)"
        ));
        return None;
    }
    let src = dir.join("pmi2_hello.c");
    let exe = dir.join("pmi2_hello");
    std::fs::write(&src, HELLO).expect("write the program");
    let out = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-lpmi2")
        .output()
        .expect("run cc");
    // The header is there: a failed build is a failure, not a skip.
    assert!(
        out.status.success(),
        "cc pmi2_hello.c -lpmi2: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

fn run(rt: &Runtime, args: &[&str]) -> Finished {
    rt.run_bounded(rt.command(args), Duration::from_secs(120))
        .unwrap_or_else(|f| panic!("the job hung\n{}", f.dump()))
}

/// PMIS-17, PMIS-18, PMIS-5, PMIS-8 through Slurm's `libpmi2`: init, job id, process
/// mapping, a fence that makes every rank's key visible to every rank, names.
#[test]
fn slurm_libpmi2_hello_kvs_and_names() {
    let rt = Runtime::new("pmi2-hello");
    let Some(exe) = build_hello(&rt.scratch()) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    for n in [1u32, 3] {
        let f = run(&rt, &["run", "-n", &n.to_string(), "--oversubscribe", exe]);
        assert_eq!(f.code, Some(0), "-n {n}\n{}", f.dump());
        let mut jobids = Vec::new();
        for r in 0..n {
            let prefix = format!("[rank {r}] rank={r} size={n} appnum=0 spawned=0 jobid=");
            let suffix = format!(" mapping=(vector,(0,1,{n})) found=1 kvs=ok names=ok");
            let jobid = f
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix(&prefix)?.strip_suffix(&suffix))
                .unwrap_or_else(|| panic!("no {prefix}…{suffix}\n{}", f.dump()));
            jobids.push(jobid.to_string());
        }
        // One job id, the job's namespace, for every rank.
        assert!(
            jobids
                .iter()
                .all(|j| j == &jobids[0] && j.starts_with("job-")),
            "{jobids:?}"
        );
        f.assert_nothing_left();
    }
}

/// PMIS-10 through `PMI2_Job_Spawn`: the children are the kernel's spawn, learn they
/// were spawned, read their spawner's pre-put key and fence among themselves.
#[test]
fn slurm_libpmi2_spawn() {
    let rt = Runtime::new("pmi2-spawn");
    let Some(exe) = build_hello(&rt.scratch()) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    let f = run(&rt, &["run", "-n", "1", "--max", "3", exe, "spawn"]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout
            .lines()
            .any(|l| l.starts_with("[rank 0] parent spawned jobid=job-")
                && l.contains("-spawn-")
                && l.ends_with(" errors=0,0")),
        "{}",
        f.dump()
    );
    for r in 0..2 {
        let want = format!("child rank={r} size=2 appnum=0 spawned=1 preput=from;parent");
        assert!(f.stdout.contains(&want), "{want}\n{}", f.dump());
    }
    f.assert_nothing_left();
}

/// A rank that is a bash script speaking PMI-2 by hand: it prints each reply's body.
const HOSTILE: &str = r#"
fd=$PMI_FD
send() { printf '%-6d%s' "${#1}" "$1" >&$fd; }
get() { IFS= read -r -N 6 len <&$fd; IFS= read -r -N "$len" body <&$fd; echo "$1: $body"; }
printf 'cmd=init pmi_version=2 pmi_subversion=0\n' >&$fd
IFS= read -r reply <&$fd; echo "init: $reply"
send 'cmd=kvs-put;key=k;value=v;'; get early
send "cmd=fullinit;pmirank=$(( (PMI_RANK + 1) % PMI_SIZE ));threaded=FALSE;"; get claim
send "cmd=fullinit;pmirank=$PMI_RANK;threaded=FALSE;"; get fullinit
send 'cmd=kvs-get;jobid=someone-else;srcid=0;key=k;'; get otherjob
send 'cmd=job-connect;jobid=someone-else;'; get connect
send 'garbage'; get garbage
send 'cmd=job-getid;'; get still
# A length field that is not one: an error, then the socket is closed.
printf 'xx    cmd=job-getid;' >&$fd; get badlen
if IFS= read -r -N 1 more <&$fd; then echo "after: open"; else echo "after: closed"; fi
"#;

/// PMIS-3, PMIS-6, PMIS-17, PMIS-18 over the raw socket.
#[test]
fn hostile_pmi2_clients_get_errors_and_touch_nothing() {
    let rt = Runtime::new("pmi2-hostile");
    let script = rt.scratch().join("hostile2.sh");
    std::fs::write(&script, HOSTILE).unwrap();
    let f = run(
        &rt,
        &["run", "-n", "2", "/bin/bash", script.to_str().unwrap()],
    );
    assert_eq!(f.code, Some(0), "{}", f.dump());
    for rank in 0..2 {
        let line = |what: &str| f.rank_line(rank, what);
        assert_eq!(
            line("init"),
            "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0"
        );
        // Refused: before fullinit, another rank's claim, another job, what is not
        // served, what does not parse ...
        for what in ["early", "claim", "otherjob", "connect", "garbage", "badlen"] {
            assert!(
                line(what).contains(";rc=-1;errmsg="),
                "{what}: {}",
                line(what)
            );
        }
        // ... and the session goes on untouched until the framing breaks.
        let want = format!(
            "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};size=2;"
        );
        assert!(line("fullinit").starts_with(&want), "{}", line("fullinit"));
        assert!(line("still").starts_with("cmd=job-getid-response;rc=0;jobid="));
        assert_eq!(line("after"), "closed");
    }
    f.assert_nothing_left();
}
