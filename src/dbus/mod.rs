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
//! method call / reply / error, signals from a named sender, and unix fds. That is
//! about 2,000 lines with their docs, over `nix`, which we already have: no crate, no
//! C library, nothing for the static build to find.
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
//! - Signals: [`Connection::subscribe`] with a [`SignalMatch`] naming the bus name
//!   whose owner alone may send the signal, then [`Connection::next_message`] with a
//!   timeout (it returns subscribed signals, and method calls on a connection that
//!   [serves them](Connection::serve_calls); never replies). A connection is used by
//!   one thread at a time; a thread that waits for signals opens its own. Signals
//!   that arrive during a `call` are kept (within bounds) for the next `next_message`.
//! - Unix fds: a reply's `h` is an index; [`Message::take_fd`] hands out the
//!   `OwnedFd` (logind's `Inhibit`). [`Message::fd_arg`] sends one.

//!
//! # What a peer can do to us
//! The system bus lets any local user send a signal to any connection, whatever its
//! match rules. So nothing reaches a reader unless it comes from the current owner of
//! the name its subscription trusts, on the path, interface and member subscribed
//! (`subscription.rs`); everything else is dropped after its header is read, before
//! its body is decoded. Memory is bounded per connection: a message longer than
//! [`MAX_INCOMING_MESSAGE`] is passed over as it arrives, never buffered
//! (`framing.rs`); a body decodes into at most [`MAX_DECODED`] accounted bytes, an `ay`
//! as one byte vector, with containers nested at most 64 deep (`marshal.rs`); the
//! queue of unread messages holds at most [`MAX_QUEUED`] messages and
//! [`MAX_QUEUED_BYTES`] (`inbox.rs`). What is dropped is counted
//! ([`Connection::stats`]) and logged, one line per 10 s at most.

mod address;
mod conn;
mod framing;
mod inbox;
mod marshal;
mod message;
mod subscription;
mod value;

#[cfg(test)]
mod tests;

pub use conn::{
    Connection, MAX_DECODED, MAX_INCOMING_MESSAGE, MAX_QUEUED, MAX_QUEUED_BYTES, SYSTEM_BUS_DEFAULT,
};
pub use inbox::ConnectionStats;
pub use marshal::MAX_DECODE_DEPTH;
pub use message::{Message, MessageKind, FLAG_NO_REPLY_EXPECTED};
pub use subscription::SignalMatch;
pub use value::{parse_signature, Type, Value};

/// The bus itself: the sender of its own messages, and the destination of its methods.
pub const BUS_NAME: &str = "org.freedesktop.DBus";
const BUS_PATH: &str = "/org/freedesktop/DBus";
const BUS_INTERFACE: &str = "org.freedesktop.DBus";
/// The error `GetNameOwner` answers for a name nobody owns.
pub const NAME_HAS_NO_OWNER: &str = "org.freedesktop.DBus.Error.NameHasNoOwner";

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
    /// Something a peer sent is over one of litelet's bounds.
    #[error("{what} of {size} bytes is over the limit of {limit}")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
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
