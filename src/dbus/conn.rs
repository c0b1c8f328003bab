//! A blocking connection to a message bus: connect to a unix-socket address, SASL
//! EXTERNAL authentication (with unix fd negotiation), `Hello`, then messages in and
//! out. One connection belongs to one thread at a time: a call blocks until its reply,
//! keeping what arrives meanwhile for `next_message`.
//!
//! Every incoming message goes the same way: the framer cuts it from the stream
//! (passing over one longer than [`MAX_INCOMING_MESSAGE`]), its header is read, the
//! subscriptions route it (a reply, a signal or call to keep, the bus's news of an
//! owner change, or something to drop unread), and only then is its body decoded,
//! within [`MAX_DECODED`] accounted bytes, into the bounded inbox.

use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};

use super::address::connect_address;
use super::framing::{Frame, Framer};
use super::inbox::{ConnectionStats, Inbox};
use super::message::{decode_header, Message, MessageKind};
use super::subscription::{owner_rule, Route, SignalMatch, Subscriptions};
use super::value::Value;
use super::{DbusError, BUS_INTERFACE, BUS_NAME, BUS_PATH, NAME_HAS_NO_OWNER};

/// Where the system bus listens when `DBUS_SYSTEM_BUS_ADDRESS` is not set.
pub const SYSTEM_BUS_DEFAULT: &str = "unix:path=/run/dbus/system_bus_socket";

/// How long connecting and authenticating may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest message litelet reads (the bus relays up to 32 MiB by default; what
/// systemd and logind answer litelet is under a few KiB). Longer ones are passed over.
pub const MAX_INCOMING_MESSAGE: usize = 1 << 20;

/// Accounted bytes one message may decode into (its header and its body each).
pub const MAX_DECODED: usize = 4 << 20;

/// Incoming signals and calls kept for `next_message`: at most this many, and at most
/// [`MAX_QUEUED_BYTES`] accounted bytes; the oldest go first.
pub const MAX_QUEUED: usize = 1024;
pub const MAX_QUEUED_BYTES: usize = 4 << 20;

/// Bytes one read takes at most.
const READ_CHUNK: usize = 64 * 1024;

// The framer lets a message be passed over only while its start is in the buffer.
const _: () = assert!(MAX_INCOMING_MESSAGE >= READ_CHUNK);

/// Descriptors one read can carry.
const MAX_FDS_PER_READ: usize = 32;

/// A connection to a bus.
pub struct Connection {
    stream: UnixStream,
    /// Bytes and descriptors read but not yet cut into messages.
    framer: Framer,
    /// What one read lands in (kept to avoid an allocation per read).
    chunk: Vec<u8>,
    /// Whether the bus agreed to pass unix fds.
    fd_passing: bool,
    last_serial: u32,
    unique_name: String,
    /// What to keep, and the owners of the names it trusts.
    subscriptions: Subscriptions,
    /// Signals and method calls kept for `next_message`, and the drop counters.
    inbox: Inbox,
}

/// What one incoming message came to.
enum Received {
    /// A method return or error, for the call waiting on its serial.
    Reply(Message),
    /// A reply to `serial` that could not be read (too long, malformed).
    BadReply { serial: u32, error: DbusError },
    /// Kept in the inbox, applied, or dropped: nothing for a waiting call.
    Handled,
}

impl Connection {
    /// Connects to the system bus: `DBUS_SYSTEM_BUS_ADDRESS`, else the well-known socket.
    pub fn system() -> Result<Self, DbusError> {
        let address = std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
            .ok()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| SYSTEM_BUS_DEFAULT.to_owned());
        Self::open(&address)
    }

    /// Connects to the bus at a D-Bus address (`unix:path=…` or `unix:abstract=…`,
    /// several separated by `;`), authenticates and says Hello.
    pub fn open(address: &str) -> Result<Self, DbusError> {
        let stream = connect_address(address)?;
        let mut conn = Connection {
            stream,
            framer: Framer::new(MAX_INCOMING_MESSAGE),
            chunk: vec![0; READ_CHUNK],
            fd_passing: false,
            last_serial: 0,
            unique_name: String::new(),
            subscriptions: Subscriptions::default(),
            inbox: Inbox::new(MAX_QUEUED, MAX_QUEUED_BYTES),
        };
        conn.authenticate()?;
        let reply = conn.call(
            Message::method_call(BUS_NAME, BUS_PATH, BUS_INTERFACE, "Hello"),
            HANDSHAKE_TIMEOUT,
        )?;
        conn.unique_name = reply
            .body
            .first()
            .ok_or_else(|| DbusError::Protocol("Hello returned nothing".into()))?
            .as_str()?
            .to_owned();
        Ok(conn)
    }

    /// The unique name (`:1.42`) the bus gave this connection.
    pub fn unique_name(&self) -> &str {
        &self.unique_name
    }

    /// Whether file descriptors can be sent and received on this connection.
    pub fn fd_passing(&self) -> bool {
        self.fd_passing
    }

    fn authenticate(&mut self) -> Result<(), DbusError> {
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let uid = nix::unistd::getuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let line = self.read_line(deadline)?;
        if !line.starts_with("OK ") {
            return Err(DbusError::Auth(line));
        }
        self.write_all(b"NEGOTIATE_UNIX_FD\r\n")?;
        let line = self.read_line(deadline)?;
        self.fd_passing = line == "AGREE_UNIX_FD";
        self.write_all(b"BEGIN\r\n")
    }

    fn read_line(&mut self, deadline: Instant) -> Result<String, DbusError> {
        loop {
            if let Some(line) = self.framer.take_line() {
                return Ok(line);
            }
            if self.framer.len() > 16 * 1024 {
                return Err(DbusError::Auth("over-long line from the bus".into()));
            }
            if !self.fill(deadline)? {
                return Err(DbusError::Timeout {
                    what: "authentication".into(),
                });
            }
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<(), DbusError> {
        self.stream
            .write_all(bytes)
            .map_err(|source| DbusError::Io {
                step: "write",
                source,
            })
    }

    /// Reads what the socket has, waiting until `deadline`. False on timeout.
    fn fill(&mut self, deadline: Instant) -> Result<bool, DbusError> {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let millis = u16::try_from(remaining.as_millis()).unwrap_or(u16::MAX);
            let mut pfd = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            match poll(&mut pfd, PollTimeout::from(millis)) {
                Ok(n) if n > 0 => break,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    return Err(DbusError::Io {
                        step: "poll",
                        source: e.into(),
                    })
                }
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
        let Some((len, fds)) = self.read_chunk()? else {
            return Ok(true);
        };
        if len == 0 {
            return Err(DbusError::Closed);
        }
        self.framer.push(&self.chunk[..len], fds);
        Ok(true)
    }

    /// One `recvmsg` into `chunk`: the bytes read and the descriptors that came with
    /// them; None when interrupted.
    fn read_chunk(&mut self) -> Result<Option<(usize, Vec<OwnedFd>)>, DbusError> {
        let fd = self.stream.as_raw_fd();
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; MAX_FDS_PER_READ]);
        let mut iov = [IoSliceMut::new(&mut self.chunk)];
        let msg =
            match recvmsg::<UnixAddr>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC) {
                Ok(msg) => msg,
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => return Ok(None),
                Err(e) => {
                    return Err(DbusError::Io {
                        step: "read",
                        source: e.into(),
                    })
                }
            };
        let mut fds = Vec::new();
        let cmsgs = msg.cmsgs().map_err(|e| DbusError::Io {
            step: "read control data",
            source: e.into(),
        })?;
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel just installed these descriptors in our table
                // for us (SCM_RIGHTS); nothing else owns them.
                fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        Ok(Some((msg.bytes, fds)))
    }

    /// Reads and handles one incoming message, or None at the deadline.
    fn receive(&mut self, deadline: Instant) -> Result<Option<Received>, DbusError> {
        let frame = loop {
            if let Some(frame) = self.framer.next_frame()? {
                break frame;
            }
            if !self.fill(deadline)? {
                return Ok(None);
            }
        };
        match frame {
            Frame::Message(bytes) => self.handle(&bytes).map(Some),
            Frame::Oversized { len, header } => {
                self.inbox
                    .oversized(len, MAX_INCOMING_MESSAGE, header.as_ref());
                let serial = header
                    .filter(|h| matches!(h.kind, MessageKind::MethodReturn | MessageKind::Error))
                    .and_then(|h| h.reply_serial);
                Ok(Some(match serial {
                    Some(serial) => Received::BadReply {
                        serial,
                        error: DbusError::TooLarge {
                            what: "reply",
                            size: len,
                            limit: MAX_INCOMING_MESSAGE,
                        },
                    },
                    None => Received::Handled,
                }))
            }
        }
    }

    /// Routes one whole message by its header; decodes the body only of what is kept.
    /// A header that does not parse ends the connection: its descriptors can no
    /// longer be told from the next message's.
    fn handle(&mut self, bytes: &[u8]) -> Result<Received, DbusError> {
        let (mut msg, body) = decode_header(bytes, MAX_DECODED)?;
        let fds = self.framer.take_fds(body.unix_fds)?;
        let route = self.subscriptions.route(&msg, &body.signature);
        if let Route::Drop(why) = &route {
            self.inbox.unwanted(&msg, why);
            return Ok(Received::Handled);
        }
        let cost = match body.decode(bytes, MAX_DECODED) {
            Ok((values, cost)) => {
                msg.body = values;
                cost
            }
            Err(error) => {
                self.inbox.undecodable(&msg, &error);
                return Ok(match (route, msg.reply_serial) {
                    (Route::Reply, Some(serial)) => Received::BadReply { serial, error },
                    _ => Received::Handled,
                });
            }
        };
        msg.fds = fds.into_iter().map(Some).collect();
        Ok(match route {
            Route::Reply => Received::Reply(msg),
            Route::OwnerChange { keep } => {
                self.subscriptions.apply_owner_change(&msg.body);
                if keep {
                    self.inbox.push(msg, cost);
                }
                Received::Handled
            }
            Route::Keep | Route::Drop(_) => {
                self.inbox.push(msg, cost);
                Received::Handled
            }
        })
    }

    /// Sends a message without waiting for anything; returns its serial.
    pub fn send(&mut self, msg: &Message) -> Result<u32, DbusError> {
        self.last_serial = self.last_serial.wrapping_add(1).max(1);
        let serial = self.last_serial;
        let bytes = msg.encode(serial)?;
        let fds: Vec<_> = msg
            .fds
            .iter()
            .map(|f| {
                f.as_ref().map(AsRawFd::as_raw_fd).ok_or_else(|| {
                    DbusError::Protocol("message holds a file descriptor already taken".into())
                })
            })
            .collect::<Result<_, _>>()?;
        if fds.is_empty() {
            self.write_all(&bytes)?;
            return Ok(serial);
        }
        if !self.fd_passing {
            return Err(DbusError::NoFdPassing);
        }
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let sent = loop {
            match sendmsg::<UnixAddr>(
                self.stream.as_raw_fd(),
                &[IoSlice::new(&bytes)],
                &cmsg,
                MsgFlags::empty(),
                None,
            ) {
                Ok(n) => break n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(DbusError::Io {
                        step: "write",
                        source: e.into(),
                    })
                }
            }
        };
        self.write_all(&bytes[sent..])?;
        Ok(serial)
    }

    /// Calls a method and waits up to `timeout` for its reply. An error reply is
    /// `DbusError::Remote` with the D-Bus error name.
    pub fn call(&mut self, msg: Message, timeout: Duration) -> Result<Message, DbusError> {
        let deadline = Instant::now() + timeout;
        let serial = self.send(&msg)?;
        loop {
            let Some(received) = self.receive(deadline)? else {
                return Err(DbusError::Timeout {
                    what: format!(
                        "reply to {}.{}",
                        msg.interface.as_deref().unwrap_or(""),
                        msg.member.as_deref().unwrap_or("")
                    ),
                });
            };
            match received {
                Received::Reply(reply) if reply.reply_serial == Some(serial) => {
                    if reply.kind == MessageKind::Error {
                        return Err(DbusError::Remote {
                            name: reply.error_name.clone().unwrap_or_default(),
                            message: reply.error_text(),
                        });
                    }
                    return Ok(reply);
                }
                Received::BadReply { serial: s, error } if s == serial => return Err(error),
                // A late reply to an earlier call that timed out, or something kept.
                Received::Reply(_) | Received::BadReply { .. } | Received::Handled => {}
            }
        }
    }

    /// The next subscribed signal (or method call, on a connection that serves them),
    /// waiting up to `timeout`; None when nothing came. Replies are never returned here.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>, DbusError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.inbox.pop() {
                return Ok(Some(m));
            }
            if self.receive(deadline)?.is_none() {
                return Ok(None);
            }
        }
    }

    /// Receives `signal` from now on, from whoever owns its sender name at the time:
    /// the owner is asked now (`GetNameOwner`) and followed (`NameOwnerChanged`). A
    /// name nobody owns yet is followed too; its signals count once someone owns it.
    pub fn subscribe(&mut self, signal: SignalMatch) -> Result<(), DbusError> {
        if !self.subscriptions.follows(&signal.sender) {
            self.follow_owner(&signal.sender)?;
        }
        self.add_rule(&signal.rule())?;
        self.subscriptions.add(signal);
        Ok(())
    }

    fn follow_owner(&mut self, name: &str) -> Result<(), DbusError> {
        // The rule first, then the question: a change after the answer arrives as a
        // signal after it, and one before it is already in the answer.
        self.add_rule(&owner_rule(name))?;
        self.subscriptions.set_owner(name, None);
        let owner = match self.get_name_owner(name) {
            Ok(owner) => Some(owner),
            Err(e) if e.remote_name() == Some(NAME_HAS_NO_OWNER) => None,
            Err(e) => return Err(e),
        };
        self.subscriptions.set_owner(name, owner);
        Ok(())
    }

    /// The unique name that owns `name` now, as this connection follows it (None when
    /// it is not followed or nobody owns it).
    pub fn followed_owner(&self, name: &str) -> Option<&str> {
        self.subscriptions.owner(name)
    }

    /// Keeps incoming method calls for `next_message` (a connection that serves
    /// methods); without this they are dropped unread.
    pub fn serve_calls(&mut self) {
        self.subscriptions.serve_calls();
    }

    /// What this connection holds and has dropped.
    pub fn stats(&self) -> ConnectionStats {
        self.inbox.stats(self.framer.capacity())
    }

    /// Asks the bus to route the broadcasts matching `rule` here.
    fn add_rule(&mut self, rule: &str) -> Result<(), DbusError> {
        let call = Message::method_call(BUS_NAME, BUS_PATH, BUS_INTERFACE, "AddMatch")
            .arg(Value::str(rule));
        self.call(call, BUS_CALL_TIMEOUT).map(drop)
    }

    /// `org.freedesktop.DBus.Properties.Get`: one property's value (unwrapped from
    /// its variant).
    pub fn get_property(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Value, DbusError> {
        let call =
            Message::method_call(destination, path, "org.freedesktop.DBus.Properties", "Get")
                .arg(Value::str(interface))
                .arg(Value::str(name));
        let reply = self.call(call, timeout)?;
        match reply.body.into_iter().next() {
            Some(Value::Variant(inner)) => Ok(*inner),
            Some(other) => Err(DbusError::Type {
                expected: "variant",
                got: other.signature(),
            }),
            None => Err(DbusError::Protocol(
                "Properties.Get returned nothing".into(),
            )),
        }
    }

    /// The names on the bus (`ListNames`).
    pub fn list_names(&mut self) -> Result<Vec<String>, DbusError> {
        let call = Message::method_call(BUS_NAME, BUS_PATH, BUS_INTERFACE, "ListNames");
        let reply = self.call(call, BUS_CALL_TIMEOUT)?;
        let names = reply
            .body
            .first()
            .ok_or_else(|| DbusError::Protocol("ListNames returned nothing".into()))?;
        names
            .as_array()?
            .iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect()
    }

    /// The unique name owning a well-known name (`GetNameOwner`).
    pub fn get_name_owner(&mut self, name: &str) -> Result<String, DbusError> {
        let call = Message::method_call(BUS_NAME, BUS_PATH, BUS_INTERFACE, "GetNameOwner")
            .arg(Value::str(name));
        let reply = self.call(call, BUS_CALL_TIMEOUT)?;
        Ok(reply
            .body
            .first()
            .ok_or_else(|| DbusError::Protocol("GetNameOwner returned nothing".into()))?
            .as_str()?
            .to_owned())
    }
}

/// Calls to the bus daemon answer at once; this only guards against a wedged bus.
const BUS_CALL_TIMEOUT: Duration = Duration::from_secs(10);
