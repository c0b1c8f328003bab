//! A blocking connection to a message bus: connect to a unix-socket address, SASL
//! EXTERNAL authentication (with unix fd negotiation), `Hello`, then messages in and
//! out. One connection belongs to one thread at a time: a call blocks until its reply,
//! keeping any signal or method call that arrives meanwhile for `next_message`.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};

use super::address::connect_address;
use super::message::{decode, message_len, Message, MessageKind};
use super::value::Value;
use super::DbusError;

/// Where the system bus listens when `DBUS_SYSTEM_BUS_ADDRESS` is not set.
pub const SYSTEM_BUS_DEFAULT: &str = "unix:path=/run/dbus/system_bus_socket";

/// How long connecting and authenticating may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Incoming signals and calls kept for `next_message`; older ones are dropped past
/// this, so a connection nobody reads cannot grow without bound.
const MAX_QUEUED: usize = 4096;

/// Descriptors one read can carry.
const MAX_FDS_PER_READ: usize = 32;

/// A connection to a bus.
pub struct Connection {
    stream: UnixStream,
    /// Bytes read but not yet parsed.
    rbuf: Vec<u8>,
    /// Descriptors received but not yet attached to a message.
    fds: VecDeque<OwnedFd>,
    /// Whether the bus agreed to pass unix fds.
    fd_passing: bool,
    last_serial: u32,
    unique_name: String,
    /// Signals and method calls that arrived while waiting for a reply.
    queue: VecDeque<Message>,
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
            rbuf: Vec::new(),
            fds: VecDeque::new(),
            fd_passing: false,
            last_serial: 0,
            unique_name: String::new(),
            queue: VecDeque::new(),
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
            if let Some(end) = self.rbuf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.rbuf[..end]).into_owned();
                self.rbuf.drain(..end + 2);
                return Ok(line);
            }
            if self.rbuf.len() > 16 * 1024 {
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
        let fd = self.stream.as_raw_fd();
        let mut chunk = vec![0u8; 64 * 1024];
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; MAX_FDS_PER_READ]);
        let (len, received) = {
            let mut iov = [IoSliceMut::new(&mut chunk)];
            let msg = match recvmsg::<UnixAddr>(
                fd,
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(msg) => msg,
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => return Ok(true),
                Err(e) => {
                    return Err(DbusError::Io {
                        step: "read",
                        source: e.into(),
                    })
                }
            };
            let mut received = Vec::new();
            let cmsgs = msg.cmsgs().map_err(|e| DbusError::Io {
                step: "read control data",
                source: e.into(),
            })?;
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    received.extend(raw);
                }
            }
            (msg.bytes, received)
        };
        for raw in received {
            // SAFETY: the kernel just installed this descriptor in our table for us
            // (SCM_RIGHTS); nothing else owns it.
            self.fds.push_back(unsafe { OwnedFd::from_raw_fd(raw) });
        }
        if len == 0 {
            return Err(DbusError::Closed);
        }
        self.rbuf.extend_from_slice(&chunk[..len]);
        Ok(true)
    }

    /// Reads one whole message, or None at the deadline.
    fn read_message(&mut self, deadline: Instant) -> Result<Option<Message>, DbusError> {
        loop {
            if self.rbuf.len() >= 16 {
                let mut head = [0u8; 16];
                head.copy_from_slice(&self.rbuf[..16]);
                let len = message_len(&head)?;
                if self.rbuf.len() >= len {
                    let (mut msg, nfds) = decode(&self.rbuf[..len])?;
                    self.rbuf.drain(..len);
                    if self.fds.len() < nfds {
                        return Err(DbusError::Protocol(format!(
                            "message announces {nfds} file descriptors, {} came",
                            self.fds.len()
                        )));
                    }
                    msg.fds = self.fds.drain(..nfds).map(Some).collect();
                    return Ok(Some(msg));
                }
            }
            if !self.fill(deadline)? {
                return Ok(None);
            }
        }
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
            let Some(reply) = self.read_message(deadline)? else {
                return Err(DbusError::Timeout {
                    what: format!(
                        "reply to {}.{}",
                        msg.interface.as_deref().unwrap_or(""),
                        msg.member.as_deref().unwrap_or("")
                    ),
                });
            };
            match reply.kind {
                MessageKind::MethodReturn if reply.reply_serial == Some(serial) => {
                    return Ok(reply)
                }
                MessageKind::Error if reply.reply_serial == Some(serial) => {
                    return Err(DbusError::Remote {
                        name: reply.error_name.clone().unwrap_or_default(),
                        message: reply.error_text(),
                    })
                }
                // A late reply to an earlier call that timed out.
                MessageKind::MethodReturn | MessageKind::Error => {}
                MessageKind::Signal | MessageKind::MethodCall => self.enqueue(reply),
            }
        }
    }

    fn enqueue(&mut self, msg: Message) {
        if self.queue.len() >= MAX_QUEUED {
            log::warn!("dbus: {MAX_QUEUED} unread messages queued, dropping the oldest");
            self.queue.pop_front();
        }
        self.queue.push_back(msg);
    }

    /// The next incoming signal or method call, waiting up to `timeout`; None when
    /// nothing came. Replies are never returned here.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>, DbusError> {
        if let Some(m) = self.queue.pop_front() {
            return Ok(Some(m));
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.read_message(deadline)? {
                None => return Ok(None),
                Some(m) if matches!(m.kind, MessageKind::Signal | MessageKind::MethodCall) => {
                    return Ok(Some(m))
                }
                Some(_) => {} // a late reply to a call that timed out
            }
        }
    }

    /// Asks the bus to route the signals matching `rule` here
    /// (`type='signal',interface='…',member='…'`).
    pub fn add_match(&mut self, rule: &str) -> Result<(), DbusError> {
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

/// The bus itself.
pub const BUS_NAME: &str = "org.freedesktop.DBus";
const BUS_PATH: &str = "/org/freedesktop/DBus";
const BUS_INTERFACE: &str = "org.freedesktop.DBus";
/// Calls to the bus daemon answer at once; this only guards against a wedged bus.
const BUS_CALL_TIMEOUT: Duration = Duration::from_secs(10);
