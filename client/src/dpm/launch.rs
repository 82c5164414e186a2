//! What a spawn needs from the runtime: a launcher of child processes. The runtime's
//! implementation (a `Spawn` request to the master, children started by the daemons) is
//! [`super::RuntimeLauncher`]; tests use an in-process fake.

/// One command of a spawn: `count` processes of `program args…` (the kernel's type: the
/// runtime request carries it as is). A spawn of several commands
/// (`MPI_Comm_spawn_multiple`) gives the children ranks in command order.
pub use dynres_core::rc::SpawnCommand;

/// What a [`ChildLauncher`] started: its own handle, opaque to the spawn.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LaunchedGroup {
    /// The launcher's identifier for the group of children.
    pub id: u64,
}

/// Starts, watches and kills the children of a spawn (only the spawn's root calls it).
pub trait ChildLauncher {
    /// Starts every command's processes with `env` added to their environment (it holds
    /// the parent's port and the children's group, SPAWN-3). `Err(why)`: nothing runs.
    fn launch(
        &mut self,
        cmds: &[SpawnCommand],
        env: &[(String, String)],
    ) -> Result<LaunchedGroup, String>;
    /// Kills every process of `g` that still runs (the spawn failed: no orphans).
    fn kill(&mut self, g: &LaunchedGroup);
    /// `Some(why)` if a child of `g` already died; polled while the handshake runs, and
    /// fails the spawn with `LaunchFailed`.
    fn lost(&mut self, g: &LaunchedGroup) -> Option<String>;
}

/// The launcher of the ranks that are not a spawn's root: the arguments of a collective
/// call matter at its root only. Launching with it fails.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoLauncher;

impl ChildLauncher for NoLauncher {
    fn launch(
        &mut self,
        _: &[SpawnCommand],
        _: &[(String, String)],
    ) -> Result<LaunchedGroup, String> {
        Err("no launcher at this rank".into())
    }

    fn kill(&mut self, _: &LaunchedGroup) {}

    fn lost(&mut self, _: &LaunchedGroup) -> Option<String> {
        None
    }
}
