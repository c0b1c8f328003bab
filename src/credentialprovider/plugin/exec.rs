//! Runs one plugin: `<bin-dir>/<name> args...` with litelet's environment plus the
//! configured `env`, the request on stdin, the answer on stdout.
//!
//! The child is the leader of a new process group. One `poll` loop on the calling
//! (pod worker) thread feeds stdin and drains stdout and stderr, so a plugin that
//! writes a lot to both never blocks on a full pipe. Limits: a deadline for the
//! whole run (upstream's one minute), after which the whole group is killed
//! (SIGKILL), and a cap on stdout (more is refused, the group killed); stderr is kept
//! up to its own cap and the rest dropped.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Upstream's deadline for one plugin run.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// Most stdout accepted: a response with many registries is a few KiB.
pub const MAX_STDOUT: usize = 1 << 20;
/// Most stderr kept for the log.
pub const MAX_STDERR: usize = 16 << 10;

/// How long a run may take and how much it may print.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub timeout: Duration,
    pub max_stdout: usize,
    pub max_stderr: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: TIMEOUT,
            max_stdout: MAX_STDOUT,
            max_stderr: MAX_STDERR,
        }
    }
}

/// A run that ended on its own.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// At most `max_stderr` bytes.
    pub stderr: Vec<u8>,
}

/// Why a run gave no output to use.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot start: {0}")]
    Spawn(std::io::Error),
    #[error("talking to the plugin: {0}")]
    Io(std::io::Error),
    #[error("no answer within {0:?}, killed")]
    Timeout(Duration),
    #[error("more than {0} bytes on stdout, killed")]
    Oversized(usize),
}

/// Runs `program` with `args` and `env`, writes `input` to its stdin, and collects
/// its output within `limits`. On an error the child's process group is killed and
/// reaped.
pub fn run(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    input: &[u8],
    limits: Limits,
) -> Result<Finished, ExecError> {
    let mut child = spawn(program, args, env)?;
    let deadline = Instant::now() + limits.timeout;
    let result = pump(&mut child, input, limits, deadline)
        .and_then(|(stdout, stderr)| Ok((wait(&mut child, deadline, limits)?, stdout, stderr)));
    match result {
        Ok((status, stdout, stderr)) => Ok(Finished {
            status,
            stdout,
            stderr,
        }),
        Err(e) => {
            kill_group(&mut child);
            Err(e)
        }
    }
}

fn spawn(program: &Path, args: &[String], env: &[(String, String)]) -> Result<Child, ExecError> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout kills what the plugin started too.
        .process_group(0);
    let child = command.spawn().map_err(ExecError::Spawn)?;
    for fd in [
        child.stdin.as_ref().map(|p| p.as_raw_fd()),
        child.stdout.as_ref().map(|p| p.as_raw_fd()),
        child.stderr.as_ref().map(|p| p.as_raw_fd()),
    ]
    .into_iter()
    .flatten()
    {
        fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
            .map_err(|e| ExecError::Io(std::io::Error::from(e)))?;
    }
    Ok(child)
}

/// The three pipes of a running child.
struct Pipes {
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

/// Feeds stdin and drains stdout and stderr until both are closed.
fn pump(
    child: &mut Child,
    input: &[u8],
    limits: Limits,
    deadline: Instant,
) -> Result<(Vec<u8>, Vec<u8>), ExecError> {
    let mut pipes = Pipes {
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
    };
    let (mut written, mut stdout, mut stderr) = (0, Vec::new(), Vec::new());
    while pipes.stdout.is_some() || pipes.stderr.is_some() {
        if written == input.len() {
            pipes.stdin = None; // EOF for the plugin
        }
        let ready = wait_ready(&pipes, deadline, limits.timeout)?;
        if ready[0] {
            written += write_some(&mut pipes.stdin, &input[written..])?;
        }
        if ready[1] {
            read_some(&mut pipes.stdout, &mut stdout, usize::MAX)?;
            if stdout.len() > limits.max_stdout {
                return Err(ExecError::Oversized(limits.max_stdout));
            }
        }
        if ready[2] {
            read_some(&mut pipes.stderr, &mut stderr, limits.max_stderr)?;
        }
    }
    Ok((stdout, stderr))
}

/// Polls the open pipes until one is ready or `deadline`; which are ready
/// (stdin, stdout, stderr).
fn wait_ready(pipes: &Pipes, deadline: Instant, timeout: Duration) -> Result<[bool; 3], ExecError> {
    let wanted = [
        pipes
            .stdin
            .as_ref()
            .map(|p| (p.as_fd(), PollFlags::POLLOUT)),
        pipes
            .stdout
            .as_ref()
            .map(|p| (p.as_fd(), PollFlags::POLLIN)),
        pipes
            .stderr
            .as_ref()
            .map(|p| (p.as_fd(), PollFlags::POLLIN)),
    ];
    let mut fds: Vec<PollFd> = wanted
        .iter()
        .flatten()
        .map(|(fd, flags)| PollFd::new(*fd, *flags))
        .collect();
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ExecError::Timeout(timeout));
    }
    let millis = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(millis)) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => return Err(ExecError::Io(e.into())),
    }
    let mut ready = [false; 3];
    let mut polled = fds.iter();
    for (slot, want) in ready.iter_mut().zip(&wanted) {
        if want.is_some() {
            *slot = polled
                .next()
                .and_then(|fd| fd.revents())
                .is_some_and(|r| !r.is_empty());
        }
    }
    Ok(ready)
}

/// Writes what stdin takes now; a plugin that closed its stdin reads no more.
fn write_some(stdin: &mut Option<ChildStdin>, data: &[u8]) -> Result<usize, ExecError> {
    let Some(pipe) = stdin else { return Ok(0) };
    match pipe.write(data) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => Ok(0),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            *stdin = None;
            Ok(data.len())
        }
        Err(e) => Err(ExecError::Io(e)),
    }
}

/// Reads what the pipe has now into `buf` (keeping at most `keep` bytes); closes
/// the pipe at EOF.
fn read_some<R: Read>(
    pipe: &mut Option<R>,
    buf: &mut Vec<u8>,
    keep: usize,
) -> Result<(), ExecError> {
    let Some(reader) = pipe else { return Ok(()) };
    let mut chunk = [0u8; 8192];
    match reader.read(&mut chunk) {
        Ok(0) => *pipe = None,
        Ok(n) => {
            let room = keep.saturating_sub(buf.len()).min(n);
            buf.extend_from_slice(&chunk[..room]);
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
        Err(e) => return Err(ExecError::Io(e)),
    }
    Ok(())
}

/// Waits for the child to exit by `deadline` (it closed its output, so this is
/// normally at once).
fn wait(child: &mut Child, deadline: Instant, limits: Limits) -> Result<ExitStatus, ExecError> {
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait().map_err(ExecError::Io)? {
            return Ok(status);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ExecError::Timeout(limits.timeout));
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// SIGKILL to the child's process group, then reaps the child.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // The group may be gone already; reaping below is what matters.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) -> std::path::PathBuf {
        let path = dir.join("plugin");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn limits(timeout_ms: u64) -> Limits {
        Limits {
            timeout: Duration::from_millis(timeout_ms),
            max_stdout: 4096,
            max_stderr: 64,
        }
    }

    #[test]
    fn stdin_args_and_env_reach_the_plugin_and_stdout_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = script(
            dir.path(),
            r#"read line; echo "$line $1 $GREETING"; echo oops >&2; exit 3"#,
        );
        let out = run(
            &plugin,
            &["arg1".into()],
            &[("GREETING".into(), "hello".into())],
            b"request\n",
            limits(10_000),
        )
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "request arg1 hello\n");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn a_plugin_past_its_deadline_is_killed_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("child.pid");
        // The plugin starts a grandchild that would outlive it, then hangs.
        let plugin = script(
            dir.path(),
            &format!("sleep 300 & echo $! > {}; wait", marker.display()),
        );
        let started = Instant::now();
        let err = run(&plugin, &[], &[], b"", limits(500)).unwrap_err();
        assert!(matches!(err, ExecError::Timeout(_)), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        let pid: i32 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed with the group: the grandchild is gone (or a zombie of init).
        let gone = (0..100).any(|_| {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie_or_gone = state.is_empty() || state.contains(") Z ");
            if !zombie_or_gone {
                std::thread::sleep(Duration::from_millis(20));
            }
            zombie_or_gone
        });
        assert!(gone, "grandchild {pid} still runs");
    }

    #[test]
    fn a_plugin_that_closes_its_output_but_runs_on_is_killed_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = script(dir.path(), "exec >&- 2>&-; sleep 300");
        let err = run(&plugin, &[], &[], b"", limits(500)).unwrap_err();
        assert!(matches!(err, ExecError::Timeout(_)), "{err}");
    }

    #[test]
    fn oversized_stdout_is_refused_and_big_stderr_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let endless = script(dir.path(), "yes credential");
        let err = run(&endless, &[], &[], b"", limits(10_000)).unwrap_err();
        assert!(matches!(err, ExecError::Oversized(4096)), "{err}");

        let noisy = script(dir.path(), "head -c 100000 /dev/zero >&2; echo answer");
        let out = run(&noisy, &[], &[], b"", limits(10_000)).unwrap();
        assert_eq!(out.stdout, b"answer\n");
        assert_eq!(out.stderr.len(), 64);
    }

    #[test]
    fn a_plugin_that_ignores_a_large_request_still_answers() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = script(dir.path(), "exec 0<&-; echo ok");
        let big = vec![b'x'; 1 << 20];
        let out = run(&plugin, &[], &[], &big, limits(10_000)).unwrap();
        assert_eq!(out.stdout, b"ok\n");
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let err = run(
            Path::new("/nonexistent/plugin"),
            &[],
            &[],
            b"",
            limits(1000),
        )
        .unwrap_err();
        assert!(matches!(err, ExecError::Spawn(_)), "{err}");
    }
}
