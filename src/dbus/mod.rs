//! A small blocking D-Bus client, for talking to systemd (the cgroup driver) and
//! logind (shutdown inhibitors) over the system bus.
//!
//! # Why our own
//! litelet has no async runtime anywhere in its tree and ships as one static glibc
//! binary (`make static`). The `dbus` crate binds libdbus, which Debian ships only as a
//! shared library, so the static build would break; `zbus` needs an async executor
//! underneath even for its blocking API. `rustbus` is synchronous, but brings its own
//! `nix` version and derive macros for far more than we use. What litelet needs is
//! small: SASL EXTERNAL, `Hello`, the marshalling of the basic and container types,
//! method call / reply / error, signals through `AddMatch`, and unix fds. That is
//! about 1,000 lines here over `nix`, which we already have, and adds no crate.
//!
//! # Use
//! ```no_run
//! use std::time::Duration;
//! use litelet::dbus::{Connection, Message, Value};
//! let mut bus = Connection::system()?;
//! let reply = bus.call(
//!     Message::method_call(
//!         "org.freedesktop.systemd1",
//!         "/org/freedesktop/systemd1",
//!         "org.freedesktop.systemd1.Manager",
//!         "StartTransientUnit",
//!     )
//!     .arg(Value::str("kubepods.slice"))
//!     .arg(Value::str("replace"))
//!     .arg(Value::properties(vec![("Description", Value::str("pods"))]))
//!     .arg(Value::array("(sa(sv))", vec![])),
//!     Duration::from_secs(10),
//! )?;
//! let job = reply.body[0].as_str()?; // an object path
//! # Ok::<(), litelet::dbus::DbusError>(())
//! ```
//! - Arguments and replies are [`Value`]s; every container carries its element
//!   signature, so `a(sv)` and `a(sa(sv))` (even empty) marshal as written.
//!   `Value::properties` builds an `a(sv)`, `Value::dict_sv` an `a{sv}`.
//! - An error reply is [`DbusError::Remote`] with the D-Bus error name
//!   (`org.freedesktop.systemd1.NoSuchUnit`) and its text.
//! - [`Connection::get_property`] is `org.freedesktop.DBus.Properties.Get`.
//! - Signals: [`Connection::add_match`] with a match rule, then
//!   [`Connection::next_message`] with a timeout (it returns incoming signals and
//!   method calls, never replies). A connection is used by one thread at a time; a
//!   thread that waits for signals opens its own connection. Signals that arrive
//!   during a `call` are kept (up to a bound) for the next `next_message`.
//! - Unix fds: a reply's `h` is an index; [`Message::take_fd`] hands out the
//!   `OwnedFd` (logind's `Inhibit`). [`Message::fd_arg`] sends one.

mod address;
mod conn;
mod marshal;
mod message;
mod value;

#[cfg(test)]
mod tests;

pub use conn::{Connection, BUS_NAME, SYSTEM_BUS_DEFAULT};
pub use message::{Message, MessageKind, FLAG_NO_REPLY_EXPECTED};
pub use value::{parse_signature, Type, Value};

/// What can go wrong talking to a bus.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    #[error("no unix transport in d-bus address {0:?}")]
    Address(String),
    #[error("connect to d-bus at {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    #[error("d-bus authentication refused: {0}")]
    Auth(String),
    #[error("d-bus {step}: {source}")]
    Io {
        step: &'static str,
        source: std::io::Error,
    },
    #[error("the bus closed the connection")]
    Closed,
    #[error("timed out waiting for {what}")]
    Timeout { what: String },
    /// The peer answered with a D-Bus error.
    #[error("{name}: {message}")]
    Remote { name: String, message: String },
    #[error("d-bus protocol: {0}")]
    Protocol(String),
    #[error("d-bus value: expected {expected}, got signature {got:?}")]
    Type { expected: &'static str, got: String },
    #[error("the bus does not pass file descriptors on this connection")]
    NoFdPassing,
}

impl DbusError {
    /// The D-Bus error name of a remote error.
    pub fn remote_name(&self) -> Option<&str> {
        match self {
            DbusError::Remote { name, .. } => Some(name),
            _ => None,
        }
    }
}
