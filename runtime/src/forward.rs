//! What processes on other hosts get of the caller's world (`RT-5`): the directory
//! they start in and their environment, so that `dynres run -n 8 -- ./prog` behaves
//! the same on every host (as srun, which forwards the whole environment; mpirun
//! forwards only `-x` variables, a habit that `-x` keeps working here).

use std::path::{Path, PathBuf};

use crate::error::LauncherError;
use dynres_client::env;
use dynres_core::rc::wire::link::{MAX_ARG_LEN, MAX_ENV, MAX_SETUP_STR};

/// Variables that describe the caller's host or session, not the job: never sent to
/// other hosts (each host has its own), and neither are `SLURM_*` (the step's) nor the
/// runtime's per-process variables (set for every process by its daemon).
pub const HOST_SPECIFIC: &[&str] = &[
    "_",
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
    "HOST",
    "HOSTNAME",
    "MAIL",
    "OLDPWD",
    "PWD",
    "SHLVL",
    "SSH_AGENT_PID",
    "SSH_AUTH_SOCK",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "SSH_TTY",
    "STY",
    "TMUX",
    "TMUX_PANE",
    "WINDOW",
    "XAUTHORITY",
    "XDG_RUNTIME_DIR",
    "XDG_SESSION_CLASS",
    "XDG_SESSION_ID",
    "XDG_SESSION_TYPE",
    env::RUNTIME_DIR,
    env::NODE_ADDR,
    env::HOST_ID,
    env::SOCKET,
    env::SECRET,
    env::DATA_KEY,
    env::NAMESPACE,
    env::RANK,
    env::APP,
    env::SIZE,
    env::LOCAL_RANK,
    env::LOCAL_SIZE,
    env::NODE_ID,
];

/// One `-x VAR[=VALUE]`: `VAR=VALUE` sets it for every process; `VAR` alone sends the
/// caller's value (it is sent anyway unless host-specific: then `-x` asks for it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvSetting {
    /// The variable.
    pub name: String,
    /// Its value, if given.
    pub value: Option<String>,
}

impl EnvSetting {
    /// Parses `VAR[=VALUE]`; the name must be a shell variable name.
    pub fn parse(s: &str) -> Result<EnvSetting, String> {
        let (name, value) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (s, None),
        };
        let valid = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(format!("-x {s}: not VAR or VAR=VALUE with a variable name"));
        }
        Ok(EnvSetting {
            name: name.to_string(),
            value,
        })
    }
}

/// The variables this host's processes get on top of the runtime's own environment
/// (which they inherit): the `-x` settings with a value.
pub fn local_env(settings: &[EnvSetting]) -> Vec<(String, String)> {
    settings
        .iter()
        .filter_map(|s| Some((s.name.clone(), s.value.clone()?)))
        .collect()
}

/// The environment sent to other hosts: `vars` (the caller's) less
/// [`HOST_SPECIFIC`] and `SLURM_*`, then the `-x` settings (a bare `-x VAR` sends the
/// caller's `VAR` even if host-specific). Variables that cannot travel (not UTF-8,
/// longer than the link carries) are left out and named in the error list.
pub fn remote_env(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    settings: &[EnvSetting],
) -> (Vec<(String, String)>, Vec<String>) {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut dropped = Vec::new();
    let mut caller = Vec::new();
    for (k, v) in vars {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => caller.push((k, v)),
            (Ok(k), Err(_)) => dropped.push(k),
            (Err(k), _) => dropped.push(k.to_string_lossy().into_owned()),
        }
    }
    let asked = |k: &str| settings.iter().any(|s| s.name == k && s.value.is_none());
    for (k, v) in &caller {
        let host_specific = HOST_SPECIFIC.contains(&k.as_str()) || k.starts_with("SLURM_");
        if !host_specific || asked(k) {
            out.push((k.clone(), v.clone()));
        }
    }
    for s in settings {
        if let Some(v) = &s.value {
            out.retain(|(k, _)| *k != s.name);
            out.push((s.name.clone(), v.clone()));
        }
    }
    out.retain(|(k, v)| {
        let fits = k.len() <= MAX_SETUP_STR && v.len() <= MAX_ARG_LEN;
        if !fits {
            dropped.push(k.clone());
        }
        fits
    });
    if out.len() > MAX_ENV {
        dropped.extend(out.drain(MAX_ENV..).map(|(k, _)| k));
    }
    (out, dropped)
}

/// The directory processes start in: `wdir` made absolute against the caller's
/// directory (`--wdir`, required on every host), else the caller's directory (used on
/// a host where it exists, else the daemon's own). Returns `(dir, required)`.
pub fn start_dir(wdir: Option<&Path>) -> Result<(PathBuf, bool), LauncherError> {
    let here =
        std::env::current_dir().map_err(|e| LauncherError::io("read the working directory", e))?;
    let dir = match wdir {
        Some(w) => here.join(w),
        None => here,
    };
    let text = dir.to_str().ok_or_else(|| {
        LauncherError::Usage(format!("working directory {} is not UTF-8", dir.display()))
    })?;
    if text.len() > MAX_SETUP_STR {
        return Err(LauncherError::Usage(format!(
            "working directory longer than {MAX_SETUP_STR} bytes"
        )));
    }
    if let Some(w) = wdir {
        if !dir.is_dir() {
            return Err(LauncherError::Usage(format!(
                "--wdir {}: not a directory here",
                w.display()
            )));
        }
    }
    Ok((dir, wdir.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn vars(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn settings_are_variable_names_with_optional_values() {
        assert_eq!(
            EnvSetting::parse("OMP_NUM_THREADS=4").unwrap(),
            EnvSetting {
                name: "OMP_NUM_THREADS".into(),
                value: Some("4".into())
            }
        );
        assert_eq!(EnvSetting::parse("A=").unwrap().value, Some(String::new()));
        assert_eq!(EnvSetting::parse("LD_LIBRARY_PATH").unwrap().value, None);
        for bad in ["", "=1", "1A=2", "A-B=1", "A B"] {
            assert!(EnvSetting::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// RT-5: the caller's environment travels, less the host's and the runtime's own
    /// variables; `-x VAR=VAL` overrides, `-x VAR` asks for a host-specific one.
    #[test]
    fn the_caller_environment_travels_less_host_specific_variables() {
        let caller = vars(&[
            ("PATH", "/opt/bin:/usr/bin"),
            ("OMP_NUM_THREADS", "2"),
            ("HOSTNAME", "login1"),
            ("SLURM_NODEID", "0"),
            ("DYNRES_SECRET", "s"),
            ("DISPLAY", ":0"),
        ]);
        let x = [
            EnvSetting::parse("OMP_NUM_THREADS=8").unwrap(),
            EnvSetting::parse("DISPLAY").unwrap(),
            EnvSetting::parse("NEW=1").unwrap(),
        ];
        let (mut env, dropped) = remote_env(caller, &x);
        env.sort();
        assert_eq!(
            env,
            [
                ("DISPLAY".to_string(), ":0".to_string()),
                ("NEW".into(), "1".into()),
                ("OMP_NUM_THREADS".into(), "8".into()),
                ("PATH".into(), "/opt/bin:/usr/bin".into()),
            ]
        );
        assert!(dropped.is_empty());
        assert_eq!(
            local_env(&x),
            [
                ("OMP_NUM_THREADS".to_string(), "8".to_string()),
                ("NEW".into(), "1".into())
            ]
        );
    }

    #[test]
    fn what_cannot_travel_is_named() {
        use std::os::unix::ffi::OsStringExt;
        let mut caller = vars(&[("OK", "1")]);
        caller.push(("BIN".into(), OsString::from_vec(vec![0xff])));
        caller.push(("BIG".into(), "x".repeat(MAX_ARG_LEN + 1).into()));
        let (env, mut dropped) = remote_env(caller, &[]);
        dropped.sort();
        assert_eq!(env, [("OK".to_string(), "1".to_string())]);
        assert_eq!(dropped, ["BIG", "BIN"]);
    }

    #[test]
    fn a_wdir_must_exist_here_and_is_made_absolute() {
        let (dir, required) = start_dir(None).unwrap();
        assert!(dir.is_absolute() && !required);
        let (dir, required) = start_dir(Some(Path::new("."))).unwrap();
        assert!(dir.is_absolute() && required);
        assert!(start_dir(Some(Path::new("/no/such/dir/here"))).is_err());
    }
}
