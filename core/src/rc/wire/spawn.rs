//! Encodings of the runtime part of a spawn (`spec/spawn.md` §9): the
//! commands a client asks for, the command a daemon launches, and the granted children.

use alloc::string::String;
use alloc::vec::Vec;

use crate::rc::{LaunchCommand, SpawnCommand, Spawned};
use crate::wire::PResult;
use crate::wire::prim::{put_seq, put_str, put_u32, seq, string, u32};

use super::values::{pid, put_pid};
use super::{MAX_APP_LEN, MAX_PROCS};

/// Most commands in one spawn (`MPI_Comm_spawn_multiple`).
pub const MAX_SPAWN_COMMANDS: usize = 64;
/// Longest program path, in bytes.
pub const MAX_PROGRAM_LEN: usize = 4096;
/// Most arguments of one command.
pub const MAX_ARGS: usize = 1024;
/// Longest argument, environment name or value, in bytes.
pub const MAX_ARG_LEN: usize = 4096;
/// Most environment variables a spawn adds.
pub const MAX_ENV: usize = 256;

fn put_args(out: &mut Vec<u8>, args: &[String]) {
    put_seq(out, args, |o, a| put_str(o, a));
}

fn args(input: &[u8]) -> PResult<'_, Vec<String>> {
    seq("args", MAX_ARGS, string("arg", MAX_ARG_LEN))(input)
}

/// `env` = `seq<name string | value string>`.
pub(super) fn put_env(out: &mut Vec<u8>, env: &[(String, String)]) {
    put_seq(out, env, |o, (k, v)| {
        put_str(o, k);
        put_str(o, v);
    });
}

/// Parses [`put_env`].
pub(super) fn env(input: &[u8]) -> PResult<'_, Vec<(String, String)>> {
    seq("env", MAX_ENV, |i| {
        let (i, k) = string("env name", MAX_ARG_LEN)(i)?;
        let (i, v) = string("env value", MAX_ARG_LEN)(i)?;
        Ok((i, (k, v)))
    })(input)
}

/// `spawn-command` = `program string | args seq<string> | count u32`.
pub(super) fn put_spawn_command(out: &mut Vec<u8>, c: &SpawnCommand) {
    put_str(out, &c.program);
    put_args(out, &c.args);
    put_u32(out, c.count);
}

/// Parses [`put_spawn_command`].
pub(super) fn spawn_command(input: &[u8]) -> PResult<'_, SpawnCommand> {
    let (i, program) = string("program", MAX_PROGRAM_LEN)(input)?;
    let (i, args) = args(i)?;
    let (i, count) = u32(i)?;
    Ok((
        i,
        SpawnCommand {
            program,
            args,
            count,
        },
    ))
}

/// `commands` = `seq<spawn-command>` (≤ [`MAX_SPAWN_COMMANDS`]).
pub(super) fn put_commands(out: &mut Vec<u8>, c: &[SpawnCommand]) {
    put_seq(out, c, put_spawn_command);
}

/// Parses [`put_commands`].
pub(super) fn commands(input: &[u8]) -> PResult<'_, Vec<SpawnCommand>> {
    seq("spawn commands", MAX_SPAWN_COMMANDS, spawn_command)(input)
}

/// `launch-command` = `program string | args seq<string> | env`.
pub(super) fn put_launch_command(out: &mut Vec<u8>, c: &LaunchCommand) {
    put_str(out, &c.program);
    put_args(out, &c.args);
    put_env(out, &c.env);
}

/// Parses [`put_launch_command`].
pub(super) fn launch_command(input: &[u8]) -> PResult<'_, LaunchCommand> {
    let (i, program) = string("program", MAX_PROGRAM_LEN)(input)?;
    let (i, args) = args(i)?;
    let (i, env) = env(i)?;
    Ok((i, LaunchCommand { program, args, env }))
}

/// `app string` (≤ [`MAX_APP_LEN`]).
pub(super) fn app(input: &[u8]) -> PResult<'_, String> {
    string("app", MAX_APP_LEN)(input)
}

/// `spawned` = `app string | procs seq<pid>`.
pub(super) fn put_spawned(out: &mut Vec<u8>, s: &Spawned) {
    put_str(out, &s.app);
    put_seq(out, &s.procs, put_pid);
}

/// Parses [`put_spawned`].
pub(super) fn spawned(input: &[u8]) -> PResult<'_, Spawned> {
    let (i, app) = app(input)?;
    let (i, procs) = seq("spawned procs", MAX_PROCS, pid)(i)?;
    Ok((i, Spawned { app, procs }))
}
