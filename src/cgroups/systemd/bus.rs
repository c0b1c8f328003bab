//! [`DbusUnits`]: the [`SystemdUnits`] seam over systemd's D-Bus API on the system bus
//! (`org.freedesktop.systemd1.Manager`).
//!
//! One connection, behind a mutex: each operation holds it from the call until its job
//! has finished, so the `JobRemoved` signal a caller waits for cannot be read by
//! another. The connection subscribes to `JobRemoved` when it is opened (before any
//! job exists, so none is missed), trusting `org.freedesktop.systemd1`: only what its
//! current owner sends on the manager's path reaches `wait_job` (any local user can
//! address a signal to litelet's connection; see `crate::dbus`). A broken connection
//! is dropped and the next operation opens a new one. Callers: pod workers and start-up, each blocking for a
//! slice's start or stop (milliseconds on a healthy host, at most [`JOB_TIMEOUT`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::dbus::{Connection, DbusError, Message, SignalMatch, Value};

use super::{Property, SystemdError, SystemdUnits};

const DESTINATION: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// How long a start or stop job may take (libcontainer waits 30 s as well).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one method call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(25);

/// systemd through the system bus.
pub struct DbusUnits {
    /// The bus address; `None` is the system bus.
    address: Option<String>,
    conn: Mutex<Option<Connection>>,
    /// How long a job may take ([`JOB_TIMEOUT`]).
    job_timeout: Duration,
}

impl std::fmt::Debug for DbusUnits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbusUnits")
            .field("address", &self.address)
            .finish()
    }
}

impl DbusUnits {
    /// systemd on the system bus; connects now, so that a host without systemd fails
    /// at start-up rather than at the first pod.
    pub fn system() -> Result<DbusUnits, SystemdError> {
        Self::open(None)
    }

    /// systemd (or a stand-in) on the bus at `address`.
    pub fn open(address: Option<String>) -> Result<DbusUnits, SystemdError> {
        let units = DbusUnits {
            address,
            conn: Mutex::new(None),
            job_timeout: JOB_TIMEOUT,
        };
        let conn = units.connect().map_err(|source| SystemdError::Bus {
            step: "connect for",
            unit: "-.slice".into(),
            source,
        })?;
        *units.lock() = Some(conn);
        Ok(units)
    }

    /// The same with another bound on each job (tests).
    pub fn with_job_timeout(mut self, timeout: Duration) -> DbusUnits {
        self.job_timeout = timeout;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        // A panic while holding the lock leaves at worst a connection mid-message:
        // it is dropped below on the next error.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn connect(&self) -> Result<Connection, DbusError> {
        let mut conn = match &self.address {
            Some(a) => Connection::open(a)?,
            None => Connection::system()?,
        };
        conn.subscribe(SignalMatch::new(
            DESTINATION,
            PATH,
            MANAGER,
            "JobRemoved",
            "uoss",
        ))?;
        // Without Subscribe systemd emits job signals only to subscribers.
        conn.call(
            Message::method_call(DESTINATION, PATH, MANAGER, "Subscribe"),
            CALL_TIMEOUT,
        )?;
        Ok(conn)
    }

    /// Runs `f` on the connection (opening one if needed); a transport failure drops
    /// the connection so the next call starts afresh.
    fn with_conn<T>(
        &self,
        step: &'static str,
        unit: &str,
        f: impl FnOnce(&mut Connection) -> Result<T, SystemdError>,
    ) -> Result<T, SystemdError> {
        let mut guard = self.lock();
        let conn = match guard.as_mut() {
            Some(conn) => conn,
            None => guard.insert(self.connect().map_err(|source| SystemdError::Bus {
                step,
                unit: unit.to_owned(),
                source,
            })?),
        };
        let result = f(conn);
        if let Err(SystemdError::Bus { source, .. }) = &result {
            if matches!(
                source,
                DbusError::Io { .. } | DbusError::Closed | DbusError::Protocol(_)
            ) {
                *guard = None;
            }
        }
        result
    }
}

/// Calls a manager method, naming the unit in the error.
fn call(
    conn: &mut Connection,
    step: &'static str,
    unit: &str,
    msg: Message,
) -> Result<Message, SystemdError> {
    conn.call(msg, CALL_TIMEOUT)
        .map_err(|source| SystemdError::Bus {
            step,
            unit: unit.to_owned(),
            source,
        })
}

/// Waits for `JobRemoved` of `job`; its result must be `done`.
fn wait_job(
    conn: &mut Connection,
    unit: &str,
    job: &str,
    timeout: Duration,
) -> Result<(), SystemdError> {
    let deadline = Instant::now() + timeout;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(SystemdError::JobTimeout {
                unit: unit.to_owned(),
                millis: timeout.as_millis() as u64,
            });
        }
        let msg = conn
            .next_message(remaining)
            .map_err(|source| SystemdError::Bus {
                step: "wait for the job of",
                unit: unit.to_owned(),
                source,
            })?;
        let Some(msg) = msg else { continue };
        if msg.member.as_deref() != Some("JobRemoved") {
            continue;
        }
        // JobRemoved(u id, o job, s unit, s result)
        let [_, Value::ObjectPath(path), _, Value::Str(result)] = msg.body.as_slice() else {
            continue;
        };
        if path != job {
            continue;
        }
        return if result == "done" {
            Ok(())
        } else {
            Err(SystemdError::JobFailed {
                unit: unit.to_owned(),
                result: result.clone(),
            })
        };
    }
}

fn job_path(reply: &Message, unit: &str, step: &'static str) -> Result<String, SystemdError> {
    reply
        .body
        .first()
        .and_then(|v| v.as_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| SystemdError::Bus {
            step,
            unit: unit.to_owned(),
            source: DbusError::Protocol("the reply holds no job path".into()),
        })
}

const UNIT_EXISTS: &str = "org.freedesktop.systemd1.UnitExists";
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";

fn set_properties(
    conn: &mut Connection,
    unit: &str,
    properties: Vec<Property>,
) -> Result<(), SystemdError> {
    let msg = Message::method_call(DESTINATION, PATH, MANAGER, "SetUnitProperties")
        .arg(Value::str(unit))
        .arg(Value::Bool(true))
        .arg(Value::properties(properties));
    call(conn, "set properties of", unit, msg).map(drop)
}

impl SystemdUnits for DbusUnits {
    fn start_slice(&self, unit: &str, properties: Vec<Property>) -> Result<(), SystemdError> {
        self.with_conn("start", unit, |conn| {
            let msg = Message::method_call(DESTINATION, PATH, MANAGER, "StartTransientUnit")
                .arg(Value::str(unit))
                .arg(Value::str("replace"))
                .arg(Value::properties(properties.clone()))
                .arg(Value::array("(sa(sv))", vec![]));
            match call(conn, "start", unit, msg) {
                Ok(reply) => {
                    let job = job_path(&reply, unit, "start")?;
                    wait_job(conn, unit, &job, self.job_timeout)
                }
                Err(SystemdError::Bus { source, .. })
                    if source.remote_name() == Some(UNIT_EXISTS) =>
                {
                    // Only the resource properties can change on a live unit.
                    let settable = properties
                        .into_iter()
                        .filter(|(name, _)| {
                            !matches!(*name, "Description" | "Wants" | "DefaultDependencies")
                        })
                        .collect();
                    set_properties(conn, unit, settable)
                }
                Err(e) => Err(e),
            }
        })
    }

    fn set_properties(&self, unit: &str, properties: Vec<Property>) -> Result<(), SystemdError> {
        self.with_conn("set properties of", unit, |conn| {
            set_properties(conn, unit, properties)
        })
    }

    fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.with_conn("stop", unit, |conn| {
            let msg = Message::method_call(DESTINATION, PATH, MANAGER, "StopUnit")
                .arg(Value::str(unit))
                .arg(Value::str("replace"));
            match call(conn, "stop", unit, msg) {
                Ok(reply) => {
                    let job = job_path(&reply, unit, "stop")?;
                    wait_job(conn, unit, &job, self.job_timeout)
                }
                Err(SystemdError::Bus { source, .. })
                    if source.remote_name() == Some(NO_SUCH_UNIT) =>
                {
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
    }
}
