//! Skipped tests, visible: a test that cannot run here (no root, no Slurm, no network
//! namespaces) still passes, so that CI on a plain machine is green, but cargo's
//! summary would show it as `ok` like a test that ran. [`skip`] records it where the
//! run's summary can list it: `.ci/run` ends with `skipped: N tests:` and the lines of
//! [`SKIPPED_FILE`].

use std::io::Write;
use std::path::PathBuf;

/// The file, in the cargo target directory, that every skipped test appends one line to
/// (`BINARY::TEST: REASON`). Nothing removes it: `.ci/run` does before its test step.
pub const SKIPPED_FILE: &str = "skipped-tests.txt";

/// The target directory of the running test executable (`target/<profile>/deps/<exe>`
/// → `target`), wherever `CARGO_TARGET_DIR` put it.
fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.to_path_buf())
}

/// Where [`skip`] appends: [`SKIPPED_FILE`] in the target directory.
pub fn skipped_file() -> Option<PathBuf> {
    target_dir().map(|d| d.join(SKIPPED_FILE))
}

/// `BINARY::TEST`: the test binary without cargo's hash, and the test's name (libtest
/// names each test's thread after it; one run on the main thread has only the binary).
fn test_name() -> String {
    let exe = std::env::current_exe().ok();
    let binary = exe
        .as_deref()
        .and_then(|e| e.file_stem())
        .and_then(|s| s.to_str())
        .map(|s| s.rsplit_once('-').map_or(s, |(b, _)| b).to_string())
        .unwrap_or_else(|| "?".into());
    match std::thread::current().name() {
        Some(t) if t != "main" => format!("{binary}::{t}"),
        _ => binary,
    }
}

/// Marks the calling test (or a variant of it) as skipped for `reason`: prints
/// `skipped: BINARY::TEST: REASON` on stderr (seen with `--nocapture` or when the test
/// fails) and appends the same line, without the prefix, to [`skipped_file`]. The
/// caller then returns (or goes on with what it can check): the test still passes.
pub fn skip(reason: impl std::fmt::Display) {
    if let Some(path) = skipped_file() {
        record(&path, &reason.to_string());
    }
}

/// [`skip`], recording in `path`.
fn record(path: &std::path::Path, reason: &str) {
    let line = format!("{}: {reason}\n", test_name());
    eprint!("skipped: {line}");
    // One write of one short line to a file opened for appending: lines of tests
    // running at once (threads and test binaries) do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("cannot record the skip in {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each skip is one line naming the test binary and the test, appended.
    #[test]
    fn a_skip_is_one_line_naming_the_test() {
        let path = std::env::temp_dir().join(format!("dynres-skip-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        record(&path, "no Slurm");
        record(&path, "not root");
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let me = "dynres_tests::skip::tests::a_skip_is_one_line_naming_the_test";
        assert_eq!(text, format!("{me}: no Slurm\n{me}: not root\n"));
        // The file is in the target directory, next to the profiles' directories.
        let file = skipped_file().unwrap();
        let target = file.parent().unwrap();
        assert!(
            target.join("debug").is_dir() || target.join("release").is_dir(),
            "{file:?}"
        );
    }
}
