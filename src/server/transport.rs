//! A served connection's byte stream ([`Transport`]: plain TCP for healthz, TLS for
//! the node API) and what a route handler did with it ([`Reply`]). Shared by the
//! connection loop (`conn.rs`) and the route handlers (`routes/`), so that the
//! handlers need nothing from the loop that calls them.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use rustls::pki_types::CertificateDer;
use rustls::{ServerConnection, StreamOwned};

use crate::server::http::Response;

/// A client connection.
pub enum Transport {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Transport {
    pub fn socket(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(s) => &s.sock,
        }
    }

    pub(crate) fn peer_certificates(&self) -> Option<Vec<CertificateDer<'static>>> {
        match self {
            Transport::Plain(_) => None,
            Transport::Tls(s) => s
                .conn
                .peer_certificates()
                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect()),
        }
    }

    /// Plaintext the TLS layer already decrypted but nobody read yet (a socket poll
    /// does not see it); 0 when none.
    pub fn buffered(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(_) => Ok(0),
            Transport::Tls(s) => match s.conn.reader().read(buf) {
                Ok(n) => Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                Err(e) => Err(e),
            },
        }
    }

    /// Waits up to `timeout` for the client to send something or hang up; true when
    /// it did (a streaming response then stops: its clients never send).
    pub fn client_stirred(&self, timeout: Duration) -> bool {
        let fd = self.socket().as_fd();
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN | PollFlags::POLLHUP)];
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        match nix::poll::poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => false,
            Ok(_) => true,
            Err(nix::errno::Errno::EINTR) => false,
            Err(_) => true,
        }
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(s) => s.flush(),
        }
    }
}

/// What a handler did with the connection.
pub enum Reply {
    /// Write this response; the connection may serve another request.
    Full(Response),
    /// The handler wrote (or proxied) the whole answer itself; close the connection
    /// when `close`.
    Streamed { close: bool },
    /// Write this response, then close the connection (401, 403, a full budget).
    Refuse(Response),
}
