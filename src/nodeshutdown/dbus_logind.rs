//! [`Logind`] over the system D-Bus (upstream systemd/inhibit_linux.go), on litelet's
//! own blocking client (`crate::dbus`):
//! - `InhibitDelayMaxUSec`: `Properties.Get` on `org.freedesktop.login1.Manager`;
//! - `Inhibit("shutdown", "litelet", why, "delay")`: the reply's `h` is the lock's fd;
//! - the delay override: litelet's drop-in under `/etc/systemd/logind.conf.d`, then
//!   `org.freedesktop.systemd1.Manager.KillUnit("systemd-logind.service", "all",
//!   SIGHUP)` so logind reads it;
//! - `PrepareForShutdown(b)`: a subscription trusting `org.freedesktop.login1`, read
//!   with `next_message`: the connection hands on only what logind's current owner
//!   sent on its path (any local user can address a signal to litelet's connection;
//!   see `crate::dbus`).
//!
//! One connection per [`DbusLogind`], used by the `node-shutdown` thread only. Every
//! call has a deadline ([`CALL_TIMEOUT`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::dbus::{Connection, DbusError, Message, SignalMatch, Value};

use super::logind::{
    write_drop_in, Connect, InhibitLock, Logind, LogindError, INHIBIT_WHO, INHIBIT_WHY,
    LOGIND_CONF_DIR,
};

const LOGIN1: &str = "org.freedesktop.login1";
const LOGIN1_PATH: &str = "/org/freedesktop/login1";
const LOGIN1_MANAGER: &str = "org.freedesktop.login1.Manager";
const SYSTEMD1: &str = "org.freedesktop.systemd1";
const SYSTEMD1_PATH: &str = "/org/freedesktop/systemd1";
const SYSTEMD1_MANAGER: &str = "org.freedesktop.systemd1.Manager";
const LOGIND_UNIT: &str = "systemd-logind.service";
/// Deadline of every call: logind and systemd answer at once unless wedged.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const SIGHUP: i32 = 1;

/// logind's `PrepareForShutdown(b)`, from whoever owns `org.freedesktop.login1`.
pub fn prepare_for_shutdown() -> SignalMatch {
    SignalMatch::new(
        LOGIN1,
        LOGIN1_PATH,
        LOGIN1_MANAGER,
        "PrepareForShutdown",
        "b",
    )
}

/// logind on one bus connection.
pub struct DbusLogind {
    bus: Connection,
    /// Where the drop-in goes (`/etc/systemd/logind.conf.d`).
    conf_dir: PathBuf,
}

fn call_error(call: &'static str) -> impl Fn(DbusError) -> LogindError {
    move |e| match e {
        DbusError::Closed => LogindError::Closed,
        source => LogindError::Call { call, source },
    }
}

impl DbusLogind {
    /// Connects to the bus at `address` (`None`: the system bus).
    pub fn open(address: Option<&str>, conf_dir: PathBuf) -> Result<DbusLogind, LogindError> {
        let bus = match address {
            Some(a) => Connection::open(a),
            None => Connection::system(),
        }
        .map_err(LogindError::Bus)?;
        if !bus.fd_passing() {
            return Err(LogindError::Connect(
                "the bus does not pass file descriptors (no inhibitor locks)".into(),
            ));
        }
        Ok(DbusLogind { bus, conf_dir })
    }
}

impl Logind for DbusLogind {
    fn inhibit_delay_max(&mut self) -> Result<Duration, LogindError> {
        let call = "get InhibitDelayMaxUSec";
        let value = self
            .bus
            .get_property(
                LOGIN1,
                LOGIN1_PATH,
                LOGIN1_MANAGER,
                "InhibitDelayMaxUSec",
                CALL_TIMEOUT,
            )
            .map_err(call_error(call))?;
        let micros = value.as_u64().map_err(call_error(call))?;
        Ok(Duration::from_micros(micros))
    }

    fn override_inhibit_delay(&mut self, delay: Duration) -> Result<(), LogindError> {
        let path = write_drop_in(&self.conf_dir, delay)?;
        log::info!("node shutdown: wrote {}", path.display());
        let reload = Message::method_call(SYSTEMD1, SYSTEMD1_PATH, SYSTEMD1_MANAGER, "KillUnit")
            .arg(Value::str(LOGIND_UNIT))
            .arg(Value::str("all"))
            .arg(Value::I32(SIGHUP));
        self.bus
            .call(reload, CALL_TIMEOUT)
            .map_err(call_error("KillUnit systemd-logind.service SIGHUP"))?;
        Ok(())
    }

    fn inhibit_shutdown(&mut self) -> Result<InhibitLock, LogindError> {
        let call = "Inhibit shutdown";
        let inhibit = Message::method_call(LOGIN1, LOGIN1_PATH, LOGIN1_MANAGER, "Inhibit")
            .arg(Value::str("shutdown"))
            .arg(Value::str(INHIBIT_WHO))
            .arg(Value::str(INHIBIT_WHY))
            .arg(Value::str("delay"));
        let mut reply = self
            .bus
            .call(inhibit, CALL_TIMEOUT)
            .map_err(call_error(call))?;
        let Some(handle) = reply.body.first().cloned() else {
            return Err(LogindError::Reply {
                call,
                message: "the reply carries no file descriptor".into(),
            });
        };
        let fd = reply.take_fd(&handle).map_err(call_error(call))?;
        Ok(InhibitLock::new(fd))
    }

    fn subscribe(&mut self) -> Result<(), LogindError> {
        self.bus
            .subscribe(prepare_for_shutdown())
            .map_err(call_error("subscribe to PrepareForShutdown"))
    }

    fn next_event(&mut self, timeout: Duration) -> Result<Option<bool>, LogindError> {
        let message = self
            .bus
            .next_message(timeout)
            .map_err(call_error("wait for PrepareForShutdown"))?;
        let Some(message) = message else {
            return Ok(None);
        };
        // The connection keeps nothing else: logind's owner sent it, on its path.
        match message.body.first().map(Value::as_bool) {
            Some(Ok(active)) => Ok(Some(active)),
            _ => {
                log::warn!(
                    "node shutdown: PrepareForShutdown without a boolean: {:?}",
                    message.body
                );
                Ok(None)
            }
        }
    }
}

/// Connects to logind on the system bus, the drop-in going to `/etc/systemd`.
pub fn connector() -> Connect {
    Box::new(|| {
        let logind = DbusLogind::open(None, PathBuf::from(LOGIND_CONF_DIR))?;
        Ok(Box::new(logind) as Box<dyn Logind>)
    })
}
