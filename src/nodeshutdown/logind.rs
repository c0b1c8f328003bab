//! The seam to systemd-logind (upstream nodeshutdown/systemd/inhibit_linux.go): the
//! narrow [`Logind`] trait the `node-shutdown` thread uses, the [`InhibitLock`] it
//! holds, and the logind drop-in that raises `InhibitDelayMaxSec`.
//!
//! The production implementation talks to logind over the system D-Bus
//! ([`super::dbus_logind`]); tests hand in a fake. A lock is a file descriptor logind
//! passed over the bus: logind holds the shutdown back while any such descriptor is
//! open, so releasing it is closing it ([`InhibitLock`] closes on drop).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Upstream's drop-in directory.
pub const LOGIND_CONF_DIR: &str = "/etc/systemd/logind.conf.d";
/// litelet's drop-in (upstream's is `99-kubelet.conf`).
pub const LOGIND_DROP_IN: &str = "99-litelet.conf";
/// Who and why, as logind lists them (`systemd-inhibit --list`).
pub const INHIBIT_WHO: &str = "litelet";
pub const INHIBIT_WHY: &str = "Kubelet needs time to handle node shutdown";

/// Why a logind step failed.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    #[error("cannot connect to the system bus: {0}")]
    Connect(String),
    #[error("cannot connect to the system bus: {0}")]
    Bus(#[source] crate::dbus::DbusError),
    /// A method call or property read failed (logind absent, access denied, ...).
    #[error("logind {call}: {source}")]
    Call {
        call: &'static str,
        source: crate::dbus::DbusError,
    },
    /// A reply that does not carry what it should.
    #[error("logind {call}: {message}")]
    Reply { call: &'static str, message: String },
    #[error("cannot write logind drop-in {path}: {source}")]
    DropIn {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The bus connection ended; the manager connects again.
    #[error("the system bus connection closed")]
    Closed,
    #[error(
        "logind InhibitDelayMaxSec is {current:?} after raising it to {wanted:?} \
         (shutdownGracePeriod); another logind.conf drop-in may override litelet's"
    )]
    DelayTooShort { current: Duration, wanted: Duration },
}

/// A delay inhibitor lock; dropping it releases the lock.
#[derive(Debug)]
pub struct InhibitLock {
    fd: OwnedFd,
}

impl InhibitLock {
    pub fn new(fd: OwnedFd) -> InhibitLock {
        InhibitLock { fd }
    }

    /// Releases the lock: logind may go on with the shutdown.
    pub fn release(self) {
        drop(self.fd);
    }
}

/// What the `node-shutdown` thread asks of logind.
pub trait Logind: Send {
    /// `InhibitDelayMaxUSec`: how long logind waits for delay locks.
    fn inhibit_delay_max(&mut self) -> Result<Duration, LogindError>;
    /// Writes litelet's drop-in with `InhibitDelayMaxSec = delay` and makes logind
    /// read its configuration again (SIGHUP through systemd's KillUnit).
    fn override_inhibit_delay(&mut self, delay: Duration) -> Result<(), LogindError>;
    /// `Inhibit("shutdown", who, why, "delay")`: a delay lock on shutdown.
    fn inhibit_shutdown(&mut self) -> Result<InhibitLock, LogindError>;
    /// Subscribes to `PrepareForShutdown`.
    fn subscribe(&mut self) -> Result<(), LogindError>;
    /// The next `PrepareForShutdown` value (true: shutting down; false: cancelled),
    /// waiting at most `timeout`; `Ok(None)` when none came.
    fn next_event(&mut self, timeout: Duration) -> Result<Option<bool>, LogindError>;
}

/// Opens a connection to logind (called again after the connection is lost).
pub type Connect = Box<dyn FnMut() -> Result<Box<dyn Logind>, LogindError> + Send>;

/// The drop-in's text: `InhibitDelayMaxSec` in whole seconds, rounded up so the
/// delay is never below the period asked for.
pub fn drop_in_text(delay: Duration) -> String {
    let seconds = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    format!("# Written by litelet for its graceful node shutdown (shutdownGracePeriod)\n[Login]\nInhibitDelayMaxSec={seconds}\n")
}

/// Writes the drop-in into `dir` (created if missing), atomically.
pub fn write_drop_in(dir: &Path, delay: Duration) -> Result<PathBuf, LogindError> {
    let path = dir.join(LOGIND_DROP_IN);
    let err = |source| LogindError::DropIn {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    crate::fsutil::write_atomic(&path, drop_in_text(delay).as_bytes(), 0o644).map_err(err)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_sets_the_delay_in_whole_seconds_never_below_the_period() {
        let text = drop_in_text(Duration::from_secs(30));
        assert!(text.contains("[Login]\nInhibitDelayMaxSec=30\n"), "{text}");
        assert!(drop_in_text(Duration::from_millis(30_100)).contains("InhibitDelayMaxSec=31\n"));
    }

    #[test]
    fn the_drop_in_is_written_into_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("logind.conf.d");
        let path = write_drop_in(&conf, Duration::from_secs(45)).unwrap();
        assert_eq!(path, conf.join("99-litelet.conf"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("InhibitDelayMaxSec=45\n"), "{text}");
        // Written again with a new value, in place.
        write_drop_in(&conf, Duration::from_secs(60)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("InhibitDelayMaxSec=60\n"), "{text}");
    }
}
