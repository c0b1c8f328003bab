//! Process-wide set-up done once at start-up, before any other thread exists.
//!
//! Shutdown: SIGTERM and SIGINT are blocked in the calling thread (so every thread
//! spawned later inherits the mask) and one `signals` thread waits for them with
//! `sigwait`. On the first one it drops the shutdown sender: every loop holds a clone
//! of the [`Shutdown`] receiver and sees it disconnect.

use std::io;

use crossbeam_channel::{bounded, Receiver, Sender};
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
    std::thread::Builder::new()
        .name("signals".into())
        .stack_size(64 * 1024)
        .spawn(move || wait_for_signal(set, sender))?;
    Ok(receiver)
}

fn wait_for_signal(set: SigSet, sender: Sender<()>) {
    match set.wait() {
        Ok(signal) => log::info!("received {signal}, shutting down"),
        Err(err) => log::error!("waiting for signals failed: {err}; shutting down"),
    }
    drop(sender);
}

/// Asks the kernel to spare litelet under memory pressure, as the kubelet does with
/// -999. Machines without CAP_SYS_RESOURCE refuse a negative value: that is logged,
/// never fatal.
pub fn protect_from_oom_killer() {
    const SCORE: &str = "-999";
    if let Err(err) = std::fs::write("/proc/self/oom_score_adj", SCORE) {
        log::warn!("cannot set own oom_score_adj to {SCORE}: {err}; continuing");
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
