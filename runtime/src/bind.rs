//! `--bind-to core`: each process bound to one CPU of its node, the one of its local
//! rank among the CPUs the runtime may use (as mpirun's `--bind-to core` with its
//! default mapping by core). The binding is reported per process at `info`.

use std::io;

/// What `--bind-to` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bind {
    /// Processes run where the kernel puts them (`--bind-to none`, the default).
    #[default]
    None,
    /// Each process on one CPU (`--bind-to core`).
    Core,
}

/// The CPUs the calling process may run on, in ascending order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a cpu_set_t of the size passed; pid 0 is the calling thread.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// The CPU of the process with local rank `local` on a node whose runtime may use
/// `cpus` (cycling when there are more processes than CPUs, as oversubscribed).
pub fn cpu_of(cpus: &[usize], local: u32) -> Option<usize> {
    (!cpus.is_empty()).then(|| cpus[local as usize % cpus.len()])
}

/// Runs `spawn` with the calling thread bound to `cpu`, then restores its mask: a
/// process started inside inherits the binding from its first instruction
/// (`posix_spawn` and `fork` copy the calling thread's mask), with no moment unbound
/// and no `pre_exec` (which would cost the fast spawn path).
pub fn spawning_on<T>(cpu: usize, spawn: impl FnOnce() -> T) -> io::Result<T> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut before: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as in `allowed_cpus`, for this thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut before) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from `allowed_cpus`, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: a valid set of the size passed, for this thread.
    if unsafe { libc::sched_setaffinity(0, size, &one) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let out = spawn();
    // SAFETY: the mask read above, for this thread. A failure leaves this thread on
    // one CPU, which slows the launcher but binds nothing else: only logged.
    if unsafe { libc::sched_setaffinity(0, size, &before) } != 0 {
        tracing::warn!(
            "cannot restore the launcher thread's CPU mask: {}",
            io::Error::last_os_error()
        );
    }
    Ok(out)
}

/// The CPU `pid` may run on, if it is exactly one (for reports and tests).
pub fn bound_cpu(pid: u32) -> io::Result<Option<usize>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
        .unwrap_or_default();
    Ok(list.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ranks_take_the_allowed_cpus_in_turn() {
        assert_eq!(cpu_of(&[2, 5, 7], 0), Some(2));
        assert_eq!(cpu_of(&[2, 5, 7], 2), Some(7));
        assert_eq!(cpu_of(&[2, 5, 7], 3), Some(2));
        assert_eq!(cpu_of(&[], 0), None);
    }

    /// A process spawned inside `spawning_on` runs on that CPU only; the spawning
    /// thread gets its whole mask back.
    #[test]
    fn a_spawned_process_inherits_the_binding_and_the_thread_is_restored() {
        let cpus = allowed_cpus().unwrap();
        let cpu = *cpus.last().unwrap();
        let mut child = spawning_on(cpu, || {
            std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .unwrap()
        })
        .unwrap();
        let bound = bound_cpu(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(bound.unwrap(), Some(cpu));
        assert_eq!(
            allowed_cpus().unwrap(),
            cpus,
            "the thread's mask is restored"
        );
    }
}
