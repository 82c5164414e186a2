//! Where a job may run: host lists as `mpirun` takes them (`--host h1:4,h2:4`,
//! `--hostfile F`) and as Slurm hands them over (`SLURM_JOB_NODELIST` with its bracket
//! ranges, `SLURM_JOB_CPUS_PER_NODE` with its `N(xK)` repeats).

/// One host of the job and how many processes it may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Name or address as the launch agent reaches it.
    pub name: String,
    /// Slots.
    pub slots: u32,
}

/// A host list that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {why}")]
pub struct HostsError {
    /// What was being read (`--host`, the hostfile's path and line, a Slurm variable).
    pub what: String,
    /// What is wrong.
    pub why: String,
}

fn err(what: impl Into<String>, why: impl Into<String>) -> HostsError {
    HostsError {
        what: what.into(),
        why: why.into(),
    }
}

/// Most slots one host may declare (the kernel bounds a job at 2^24 in all).
const MAX_HOST_SLOTS: u32 = 1 << 20;

/// Most hosts a Slurm node list or count list may expand to: each range is bounded,
/// but a long list of them (`n[0-65535],n[0-65535],…`) would fill memory before the
/// job's slot limit refuses it.
pub const MAX_HOSTS: usize = 1 << 18;

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        && !name.starts_with('-')
}

fn slots(what: &str, s: &str) -> Result<u32, HostsError> {
    match s.parse::<u32>() {
        Ok(n) if (1..=MAX_HOST_SLOTS).contains(&n) && s.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(n)
        }
        _ => Err(err(
            what,
            format!("bad slot count {s:?} (1..={MAX_HOST_SLOTS})"),
        )),
    }
}

fn push(hosts: &mut Vec<Host>, what: &str, name: &str, n: u32) -> Result<(), HostsError> {
    if !valid_name(name) {
        return Err(err(what, format!("bad host name {name:?}")));
    }
    // As mpirun: naming a host twice adds to its slots.
    match hosts.iter_mut().find(|h| h.name == name) {
        Some(h) => {
            h.slots = h
                .slots
                .checked_add(n)
                .filter(|s| *s <= MAX_HOST_SLOTS)
                .ok_or_else(|| err(what, format!("too many slots on {name}")))?
        }
        None => hosts.push(Host {
            name: name.to_string(),
            slots: n,
        }),
    }
    Ok(())
}

/// Reads and parses the hostfile `path`: a regular file of at most
/// [`MAX_HOSTFILE`](crate::input::MAX_HOSTFILE) bytes (a FIFO or a device is refused
/// without waiting on it).
pub fn read_hostfile(path: &str) -> Result<Vec<Host>, HostsError> {
    let text = crate::input::read_regular(std::path::Path::new(path), crate::input::MAX_HOSTFILE)
        .map_err(|e| err(format!("hostfile {path}"), e.problem.to_string()))?;
    parse_hostfile(path, &text)
}

/// Parses `--host h1:4,h2,h3:2` (a host without `:N` has one slot, as in `mpirun`).
pub fn parse_host_arg(arg: &str) -> Result<Vec<Host>, HostsError> {
    let what = "--host";
    let mut hosts = Vec::new();
    for item in arg.split(',') {
        let item = item.trim();
        let (name, n) = match item.rsplit_once(':') {
            Some((name, n)) => (name, slots(what, n)?),
            None => (item, 1),
        };
        push(&mut hosts, what, name, n)?;
    }
    Ok(hosts)
}

/// Parses a hostfile: one host per line, `name`, `name slots=N` (Open MPI) or `name:N`;
/// `#` starts a comment.
pub fn parse_hostfile(path: &str, text: &str) -> Result<Vec<Host>, HostsError> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let what = format!("{path}:{}", i + 1);
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        let (name, mut n) = match first.rsplit_once(':') {
            Some((name, n)) => (name, slots(&what, n)?),
            None => (first, 1),
        };
        for w in words {
            match w.split_once('=') {
                Some(("slots", v)) => n = slots(&what, v)?,
                // Other Open MPI keys (max_slots=…) do not change where we run.
                Some(("max_slots", _)) => {}
                _ => return Err(err(&what, format!("unknown field {w:?}"))),
            }
        }
        push(&mut hosts, &what, name, n)?;
    }
    if hosts.is_empty() {
        return Err(err(path, "no host in the file"));
    }
    Ok(hosts)
}

/// Expands a Slurm node list: `n[1-3,07],login,gpu[01-02]` → `n1 n2 n3 n07 login gpu01
/// gpu02` (zero padding kept, as Slurm does).
pub fn expand_nodelist(list: &str) -> Result<Vec<String>, HostsError> {
    let what = "SLURM_JOB_NODELIST";
    let mut out = Vec::new();
    let bytes = list.as_bytes();
    let mut start = 0;
    let mut depth = 0;
    let mut items = Vec::new();
    // Split on commas outside brackets.
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' if depth > 0 => depth -= 1,
            b']' => return Err(err(what, "unbalanced ]")),
            b',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(err(what, "unbalanced ["));
    }
    items.push(&list[start..]);
    for item in items {
        let item = item.trim();
        let Some(open) = item.find('[') else {
            if !valid_name(item) {
                return Err(err(what, format!("bad node name {item:?}")));
            }
            out.push(item.to_string());
            continue;
        };
        let prefix = &item[..open];
        let Some(rest) = item[open + 1..].strip_suffix(']') else {
            return Err(err(what, format!("{item:?}: text after ]")));
        };
        for range in rest.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let (a, b) = match (lo.parse::<u64>(), hi.parse::<u64>()) {
                (Ok(a), Ok(b)) if a <= b && b - a < 1 << 16 => (a, b),
                _ => return Err(err(what, format!("bad range {range:?}"))),
            };
            let width = lo.len();
            if out.len() as u64 + (b - a) >= MAX_HOSTS as u64 {
                return Err(err(what, format!("more than {MAX_HOSTS} nodes")));
            }
            for n in a..=b {
                let name = format!("{prefix}{n:0width$}");
                if !valid_name(&name) {
                    return Err(err(what, format!("bad node name {name:?}")));
                }
                out.push(name);
            }
        }
    }
    Ok(out)
}

/// Expands `SLURM_JOB_CPUS_PER_NODE`: `2(x3),1` → `[2, 2, 2, 1]`.
pub fn expand_counts(counts: &str) -> Result<Vec<u32>, HostsError> {
    let what = "SLURM_JOB_CPUS_PER_NODE";
    let mut out = Vec::new();
    for item in counts.split(',') {
        let item = item.trim();
        let (n, times) = match item.split_once("(x") {
            Some((n, t)) => {
                let t = t
                    .strip_suffix(')')
                    .and_then(|t| t.parse::<u32>().ok())
                    .filter(|t| *t >= 1 && *t < 1 << 16)
                    .ok_or_else(|| err(what, format!("bad repeat in {item:?}")))?;
                (n, t)
            }
            None => (item, 1),
        };
        let n = slots(what, n)?;
        if out.len() + times as usize > MAX_HOSTS {
            return Err(err(what, format!("more than {MAX_HOSTS} nodes")));
        }
        out.extend(std::iter::repeat_n(n, times as usize));
    }
    Ok(out)
}

/// The hosts of the Slurm allocation this process runs in, from `SLURM_JOB_NODELIST`
/// and `SLURM_JOB_CPUS_PER_NODE`; `None` outside Slurm.
pub fn from_slurm_env(
    get: impl Fn(&str) -> Option<String>,
) -> Option<Result<Vec<Host>, HostsError>> {
    let list = get("SLURM_JOB_NODELIST")?;
    Some((|| {
        let names = expand_nodelist(&list)?;
        let counts = match get("SLURM_JOB_CPUS_PER_NODE") {
            Some(c) => expand_counts(&c)?,
            None => vec![1; names.len()],
        };
        if counts.len() != names.len() {
            return Err(err(
                "SLURM_JOB_CPUS_PER_NODE",
                format!("{} counts for {} nodes", counts.len(), names.len()),
            ));
        }
        Ok(names
            .into_iter()
            .zip(counts)
            .map(|(name, slots)| Host { name, slots })
            .collect())
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, slots: u32) -> Host {
        Host {
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn host_arguments_as_mpirun_reads_them() {
        assert_eq!(
            parse_host_arg("h1:4,h2,10.77.0.3:2,h2:3").unwrap(),
            [h("h1", 4), h("h2", 4), h("10.77.0.3", 2)]
        );
        for bad in [
            "",
            "h1:0",
            "h1:-2",
            "h1:x",
            "-oProxyCommand=x",
            "a b",
            "h:99999999",
        ] {
            assert!(parse_host_arg(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hostfiles_in_open_mpi_and_colon_form() {
        let text = "# cluster\nn1 slots=4\nn2:2  # comment\n\nn3 slots=1 max_slots=8\n";
        assert_eq!(
            parse_hostfile("hf", text).unwrap(),
            [h("n1", 4), h("n2", 2), h("n3", 1)]
        );
        let e = parse_hostfile("hf", "n1 cores=3\n").unwrap_err();
        assert_eq!(e.what, "hf:1");
        assert!(parse_hostfile("hf", "# nothing\n").is_err());
    }

    /// A hostfile that is a device, or too large, is refused with one line naming it
    /// (before: `/dev/zero` was read until memory ran out).
    #[test]
    fn a_hostfile_must_be_a_small_regular_file() {
        assert_eq!(
            read_hostfile("/dev/zero").unwrap_err().to_string(),
            "hostfile /dev/zero: is a character device, not a regular file"
        );
        let f = std::env::temp_dir().join(format!("dynres-hosts-{}", std::process::id()));
        std::fs::write(&f, "n1 slots=2\n").unwrap();
        let path = f.to_str().unwrap();
        assert_eq!(read_hostfile(path).unwrap(), [h("n1", 2)]);
        let big = "n1\n".repeat(crate::input::MAX_HOSTFILE as usize / 3 + 1);
        std::fs::write(&f, big).unwrap();
        assert_eq!(
            read_hostfile(path).unwrap_err().to_string(),
            format!("hostfile {path}: is larger than the limit of 1048576 bytes")
        );
        let _ = std::fs::remove_file(&f);
    }

    #[test]
    fn slurm_node_lists_and_counts_expand() {
        assert_eq!(
            expand_nodelist("n[1-3,07],login,gpu[01-02]").unwrap(),
            ["n1", "n2", "n3", "n07", "login", "gpu01", "gpu02"]
        );
        assert_eq!(expand_counts("2(x3),1").unwrap(), [2, 2, 2, 1]);
        for bad in ["n[1-", "n]1[", "n[3-1]", "n[1-999999]", "n[a]"] {
            assert!(expand_nodelist(bad).is_err(), "{bad:?}");
        }
        assert!(expand_counts("2(x0)").is_err());
        // Bounded ranges, but too many of them.
        let huge = ["n[00000-65535]"; 5].join(",");
        assert_eq!(
            expand_nodelist(&huge).unwrap_err().to_string(),
            format!("SLURM_JOB_NODELIST: more than {MAX_HOSTS} nodes")
        );
        assert!(expand_counts(&["1(x65535)"; 5].join(",")).is_err());
        let env = |k: &str| match k {
            "SLURM_JOB_NODELIST" => Some("n[1-2]".to_string()),
            "SLURM_JOB_CPUS_PER_NODE" => Some("2(x2)".to_string()),
            _ => None,
        };
        assert_eq!(
            from_slurm_env(env).unwrap().unwrap(),
            [h("n1", 2), h("n2", 2)]
        );
        assert!(from_slurm_env(|_| None).is_none());
    }
}
