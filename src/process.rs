//! Process-wide set-up done once at start-up, before any other thread exists.
//!
//! Shutdown: SIGTERM and SIGINT are blocked in the calling thread (so every thread
//! spawned later inherits the mask) and one `signals` thread waits for them with
//! `sigwait`. On the first one it drops the shutdown sender: every loop holds a clone
//! of the [`Shutdown`] receiver and sees it disconnect.
//!
//! Essential threads: a thread litelet cannot run without (the watches, node, lease,
//! status, events, PLEG, GC, the server's accept loops, …) is started with
//! [`spawn_essential`]. A panic in it logs the thread's name and the panic and ends the
//! process with [`EXIT_THREAD_PANIC`], so the service manager restarts litelet rather
//! than leaving an agent that looks alive but no longer reports or watches. Pod
//! workers, probe attempts and per-connection threads are not essential: one bad pod
//! or client never stops the agent (the profiles keep `panic = "unwind"` for them).

use std::any::Any;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};

/// A receiver that never gets a message and disconnects when shutdown begins.
pub type Shutdown = Receiver<()>;

/// Blocks SIGTERM/SIGINT in this thread and starts the `signals` thread.
/// Call before spawning any other thread.
pub fn install_shutdown_signals() -> io::Result<Shutdown> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
        .map_err(io::Error::from)?;
    let (sender, receiver) = bounded::<()>(0);
    // Essential: were it to unwind, the dropped sender would look like a clean
    // shutdown and litelet would exit 0.
    spawn_essential("signals", 64 * 1024, move || wait_for_signal(set, sender))?;
    Ok(receiver)
}

fn wait_for_signal(set: SigSet, sender: Sender<()>) {
    match set.wait() {
        Ok(signal) => log::info!("received {signal}, shutting down"),
        Err(err) => log::error!("waiting for signals failed: {err}; shutting down"),
    }
    drop(sender);
}

/// A descriptor that hangs up when shutdown begins, for loops that wait in `poll` on
/// sockets: with it in their poll set they sleep until there is work or shutdown,
/// instead of waking on a timer to look at the [`Shutdown`] channel. A `stop-fd`
/// thread holds the write end of a pipe and drops it when the channel disconnects.
pub struct ShutdownFd {
    read: OwnedFd,
}

impl ShutdownFd {
    /// Starts watching `shutdown`.
    pub fn new(shutdown: Shutdown) -> io::Result<Arc<ShutdownFd>> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        // Essential: an unwinding thread would drop the write end and stop the loops
        // as if shutdown had begun.
        spawn_essential("stop-fd", 64 * 1024, move || {
            let _ = shutdown.recv();
            drop(write);
        })?;
        Ok(Arc::new(ShutdownFd { read }))
    }

    /// True once shutdown has begun (the pipe hung up).
    pub fn is_set(&self) -> bool {
        let mut fds = [PollFd::new(self.read.as_fd(), PollFlags::POLLIN)];
        nix::poll::poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
    }
}

impl AsFd for ShutdownFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}

/// The kubelet's own `oom_score_adj` unless `oomScoreAdj` says otherwise (upstream's
/// `qos.KubeletOOMScoreAdj`).
pub const DEFAULT_OOM_SCORE_ADJ: i32 = -999;

/// An `oomScoreAdj` outside the kernel's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("oomScoreAdj (--oom-score-adj) {0} must be between -1000 and 1000")]
pub struct OomScoreAdjError(pub i32);

/// Checks `oomScoreAdj` as upstream does at start-up.
pub fn check_oom_score_adj(score: i32) -> Result<i32, OomScoreAdjError> {
    match score {
        -1000..=1000 => Ok(score),
        other => Err(OomScoreAdjError(other)),
    }
}

/// Sets litelet's own `oom_score_adj` (`oomScoreAdj`, default -999: the kernel spares
/// litelet under memory pressure, as upstream's kubelet). Machines without
/// CAP_SYS_RESOURCE refuse a lower value: that is logged, never fatal, as upstream.
pub fn set_own_oom_score_adj(score: i32) {
    set_oom_score_adj(Path::new("/proc/self/oom_score_adj"), score);
}

fn set_oom_score_adj(path: &Path, score: i32) -> bool {
    match std::fs::write(path, score.to_string()) {
        Ok(()) => true,
        Err(err) => {
            log::warn!("cannot set own oom_score_adj to {score}: {err}; continuing");
            false
        }
    }
}

/// glibc gives threads that allocate at the same time their own malloc arenas (up to
/// eight per core), and memory freed into an arena stays there: with a thread per pod
/// the retained memory grows with the pod count. Two arenas suit litelet's allocation
/// rate (about 1 MiB less RSS at 110 pods, measured with `make bench`). A
/// `MALLOC_ARENA_MAX` in the environment is left to win. Call before spawning threads.
pub fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only tunes the allocator and takes plain integers; no other
        // thread exists yet to race the change.
        unsafe {
            nix::libc::mallopt(nix::libc::M_ARENA_MAX, 2);
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit, as Go programs
/// (the upstream kubelet among them) do at start: the node API holds a socket and a
/// log file or a runtime socket per stream, and the usual soft limit (1024) would cap
/// it near 250 streams. Returns the soft limit in force afterwards.
pub fn raise_open_files_limit() -> io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft >= hard {
        return Ok(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Ok(hard),
        Err(err) => {
            log::warn!("cannot raise the open files limit from {soft} to {hard}: {err}");
            Ok(soft)
        }
    }
}

/// Exit code of a process ended by a panic in an essential thread (EX_SOFTWARE).
pub const EXIT_THREAD_PANIC: i32 = 70;

/// Test hook, for the integration tests only: the essential thread of this name
/// panics as soon as it starts, so a test can watch the process end. Read once.
pub const TEST_PANIC_THREAD_ENV: &str = "LITELET_TEST_PANIC_THREAD";

fn test_panic_thread() -> Option<&'static str> {
    static NAME: OnceLock<Option<String>> = OnceLock::new();
    NAME.get_or_init(|| std::env::var(TEST_PANIC_THREAD_ENV).ok())
        .as_deref()
}

/// Spawns a named thread litelet cannot run without: if `body` panics, the process
/// logs the thread and the panic and exits with [`EXIT_THREAD_PANIC`].
pub fn spawn_essential<T: Send + 'static>(
    name: impl Into<String>,
    stack_size: usize,
    body: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    let name = name.into();
    let panic_now = test_panic_thread() == Some(name.as_str());
    std::thread::Builder::new()
        .name(name.clone())
        .stack_size(stack_size)
        .spawn(move || {
            exit_on_panic(&name, move || {
                if panic_now {
                    panic!("{TEST_PANIC_THREAD_ENV} names this thread");
                }
                body()
            })
        })
}

/// Runs `body` on the calling thread; a panic in it ends the process as in
/// [`spawn_essential`] (for the sync loop, which runs on the main thread).
pub fn exit_on_panic<T>(name: &str, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            log::error!(
                "essential thread {name:?} panicked: {}; exiting (code {EXIT_THREAD_PANIC}) \
                 so that litelet is restarted",
                panic_message(payload.as_ref())
            );
            log::logger().flush();
            // `_exit`, not `exit`: atexit handlers and C++ static destructors (gRPC
            // core) would run while the other threads still use them, which can hang
            // or crash instead of ending with this code. Nothing of litelet's state
            // needs a clean exit: containers are left to the runtime anyway.
            // SAFETY: `_exit` takes a plain integer and never returns.
            unsafe { nix::libc::_exit(EXIT_THREAD_PANIC) }
        }
    }
}

/// The text of a panic payload (`panic!` with a literal or a format string).
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a non-string panic payload"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shutdown_fd_wakes_a_poll_when_the_channel_disconnects() {
        let (tx, rx) = bounded::<()>(0);
        let stop = ShutdownFd::new(rx).unwrap();
        assert!(!stop.is_set());
        let waiter = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut fds = [PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
                nix::poll::poll(&mut fds, PollTimeout::from(10_000u16)).unwrap()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "woke before shutdown");
        drop(tx);
        assert_eq!(waiter.join().unwrap(), 1, "the poll timed out");
        assert!(stop.is_set());
    }

    #[test]
    fn oom_score_adj_is_checked_and_a_refused_write_is_survived() {
        for ok in [-1000, -999, 0, 1000] {
            assert_eq!(check_oom_score_adj(ok), Ok(ok));
        }
        for bad in [-1001, 1001, i32::MIN] {
            assert_eq!(
                check_oom_score_adj(bad).unwrap_err().to_string(),
                format!("oomScoreAdj (--oom-score-adj) {bad} must be between -1000 and 1000")
            );
        }
        // Raising one's own score is always allowed: the real file takes it.
        let own = Path::new("/proc/self/oom_score_adj");
        let before: i32 = std::fs::read_to_string(own)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let raised = (before + 1).min(1000);
        assert!(set_oom_score_adj(own, raised));
        assert_eq!(
            std::fs::read_to_string(own).unwrap().trim(),
            raised.to_string()
        );
        // A write the kernel refuses (out of range) is logged, not fatal.
        assert!(!set_oom_score_adj(own, 5000));
        assert!(!set_oom_score_adj(
            Path::new("/nonexistent/oom_score_adj"),
            -999
        ));
    }

    #[test]
    fn panic_messages_are_read_from_both_payload_kinds() {
        let literal = catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(literal.as_ref()), "plain");
        let formatted = catch_unwind(|| panic!("n = {}", 3)).unwrap_err();
        assert_eq!(panic_message(formatted.as_ref()), "n = 3");
    }

    #[test]
    fn an_essential_thread_that_returns_is_joined_normally() {
        let handle = spawn_essential("ess-test", 64 * 1024, || 7).unwrap();
        assert_eq!(handle.thread().name(), Some("ess-test"));
        assert_eq!(handle.join().unwrap(), 7);
    }
}
