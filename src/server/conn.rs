//! One served connection: the transport (plain TCP for healthz, TLS for the node
//! API), the TLS handshake under a deadline, and the keep-alive request loop that
//! authenticates, authorizes and dispatches each request.
//!
//! Runs on its own `srv-conn` thread, which the accept loop spawned after taking a
//! connection slot; the slot is released when the thread ends. Every socket read and
//! write has a timeout, so a client that stops sending or reading costs one thread
//! for at most that long and never blocks another connection or litelet's loops.
//!
//! On the API port the connection holds a [`Ticket`] of the pending budget until its
//! first request is authenticated and authorized: the handshake and that request's
//! head must arrive within `unauthenticated_timeout` together. The ticket then moves
//! to the authorized budget of the credential's [`Class`]. A 401 or 403 answer closes
//! the connection, so a client without credentials or rights cannot sit on one.

use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::{ServerConnection, StreamOwned};

use crate::metrics;
use crate::server::auth::{AuthnError, Credential};
use crate::server::authz::{self, Decision};
use crate::server::budget::{Class, Ticket};
use crate::server::http::{self, ReadError, ReadLimits, Request, Response};
use crate::server::routes;
pub use crate::server::transport::{Reply, Transport};
use crate::server::Shared;

/// Which of the two servers a connection belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The loopback health port: plain HTTP, `/healthz` only, no authentication.
    Healthz,
    /// The node API: TLS, authenticated and authorized.
    Api,
}

/// Serves a connection until it closes, errs or times out. `ticket` is its place in
/// the API port's budget (None on the healthz port).
pub fn serve(shared: Arc<Shared>, kind: Kind, socket: TcpStream, mut ticket: Option<Ticket>) {
    let limits = shared.config.limits;
    let _ = socket.set_nodelay(true);
    let _ = socket.set_write_timeout(Some(limits.write_timeout));
    // The handshake and the first request head share one short budget.
    let unauthenticated_until = Instant::now() + limits.unauthenticated_timeout;
    let mut transport = match (&shared.tls, kind) {
        (Some(config), Kind::Api) => {
            match handshake(config.clone(), socket, limits.unauthenticated_timeout) {
                Some(t) => t,
                None => return,
            }
        }
        _ => Transport::Plain(socket),
    };
    let chain = transport.peer_certificates();
    let read_limits = ReadLimits {
        max_header_bytes: limits.max_header_bytes,
        max_body_bytes: limits.max_body_bytes,
    };
    let mut buf = Vec::new();
    let mut first = true;
    // Set when a request was refused unread: the client may still be sending it.
    let mut drain = false;
    loop {
        if shared.stopping.load(Ordering::Relaxed) {
            break;
        }
        let wait = if first {
            limits.header_timeout
        } else {
            limits.idle_timeout
        };
        first = false;
        let mut deadline = Instant::now() + wait;
        if kind == Kind::Api && !ticket.as_ref().is_none_or(Ticket::is_authorized) {
            deadline = deadline.min(unauthenticated_until);
        }
        let read = {
            // A second handle for the deadlines, closed before the request is served
            // (a stream would hold it for its whole life).
            let socket = transport.socket().try_clone();
            let mut set_deadline = |left: Duration| match &socket {
                Ok(s) => s.set_read_timeout(Some(left.max(Duration::from_millis(1)))),
                Err(_) => Ok(()),
            };
            http::read_request(
                &mut transport,
                &mut buf,
                read_limits,
                deadline,
                &mut set_deadline,
            )
        };
        let req = match read {
            Ok(req) => req,
            Err(ReadError::Closed | ReadError::TimedOut | ReadError::Io(_)) => break,
            Err(err) => {
                let code = match err {
                    ReadError::HeadTooLarge(_) => 431,
                    ReadError::BodyTooLarge(_) => 413,
                    _ => 400,
                };
                let _ = http::write_response(
                    &mut transport,
                    &Response::text(code, err.to_string()),
                    true,
                    false,
                );
                drain = true;
                break;
            }
        };
        let _ = transport
            .socket()
            .set_read_timeout(Some(limits.header_timeout));
        let head_only = req.method == "HEAD";
        let close = req.wants_close();
        let reply = match kind {
            Kind::Healthz => routes::healthz_only(&shared, &req),
            Kind::Api => guarded(
                &shared,
                &req,
                chain.as_deref(),
                ticket.as_mut(),
                &mut transport,
                &mut buf,
            ),
        };
        match reply {
            Reply::Full(resp) => {
                metrics::HTTP_REQUESTS
                    .inc(&[routes::path_kind(&req.raw_path), &resp.status.to_string()]);
                if http::write_response(&mut transport, &resp, close, head_only).is_err() || close {
                    break;
                }
            }
            Reply::Streamed { close: true } => break,
            Reply::Streamed { close: false } => {}
            Reply::Refuse(resp) => {
                metrics::HTTP_REQUESTS
                    .inc(&[routes::path_kind(&req.raw_path), &resp.status.to_string()]);
                let _ = http::write_response(&mut transport, &resp, true, head_only);
                // The client may still be sending a body: read it out so it gets
                // the answer rather than a reset.
                drain = true;
                break;
            }
        }
    }
    if let Transport::Tls(s) = &mut transport {
        s.conn.send_close_notify();
        let _ = s.conn.complete_io(&mut s.sock);
    }
    if drain {
        drain_input(transport.socket());
    }
    let _ = transport.socket().shutdown(std::net::Shutdown::Both);
}

/// Longest a refused request's remaining bytes are read and dropped before closing.
const DRAIN_TIME: Duration = Duration::from_millis(500);
/// Most bytes dropped that way.
const DRAIN_BYTES: usize = 4 << 20;

/// Closing a socket with unread input makes the kernel send a reset, and the client
/// then loses the answer it has not read yet (e.g. the 431 for an oversized head).
/// So, as Go's server does, stop writing, then read and drop what the client is still
/// sending, for a bounded time and size.
#[inline(never)]
fn drain_input(socket: &TcpStream) {
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + DRAIN_TIME;
    let mut sink = [0u8; 16 * 1024];
    let mut total = 0;
    let mut reader = socket;
    while total < DRAIN_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || socket.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match reader.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => total += n,
        }
    }
}

/// Completes the TLS handshake within `timeout`; None when it fails.
#[inline(never)]
fn handshake(
    config: Arc<rustls::ServerConfig>,
    mut socket: TcpStream,
    timeout: Duration,
) -> Option<Transport> {
    let mut conn = ServerConnection::new(config).ok()?;
    let deadline = Instant::now() + timeout;
    while conn.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || socket.set_read_timeout(Some(left)).is_err() {
            return None;
        }
        match conn.complete_io(&mut socket) {
            Ok((0, 0)) if conn.is_handshaking() => return None,
            Ok(_) => {}
            Err(err) => {
                log::debug!("tls handshake with {:?} failed: {err}", socket.peer_addr());
                // Send the alert, if any, so the client learns why.
                let _ = conn.write_tls(&mut socket);
                return None;
            }
        }
    }
    Some(Transport::Tls(Box::new(StreamOwned::new(conn, socket))))
}

/// Authenticates and authorizes, then dispatches. Failures reveal nothing about pods
/// and close the connection; the first authorized request moves the connection to
/// the authorized budget of its class (`ticket`), or is refused with a 503 when that
/// class is full.
#[inline(never)]
fn guarded(
    shared: &Shared,
    req: &Request,
    chain: Option<&[CertificateDer<'static>]>,
    ticket: Option<&mut Ticket>,
    transport: &mut Transport,
    buf: &mut Vec<u8>,
) -> Reply {
    let (user, credential) = match shared
        .authn
        .authenticate(chain, req.header("authorization"))
    {
        Ok(found) => found,
        Err(err) => {
            if let AuthnError::Review(msg) = &err {
                log::warn!("node server: {msg}");
            } else {
                log::debug!("node server: unauthenticated request: {err}");
            }
            return Reply::Refuse(Response::text(401, "Unauthorized"));
        }
    };
    let attrs = authz::attributes(&req.method, &req.raw_path);
    match shared.authz.authorize(&user, &attrs) {
        Decision::Allow => {}
        Decision::Deny(msg) => {
            log::debug!("node server: {msg}");
            return Reply::Refuse(Response::text(403, msg));
        }
        Decision::Error(msg) => {
            log::warn!("node server: {msg}");
            return Reply::Full(Response::text(500, msg));
        }
    }
    let class = match credential {
        Credential::ClientCertificate => Class::Certificate,
        Credential::Token | Credential::Anonymous => Class::User(user.username.clone()),
    };
    if let Some(Err(full)) = ticket.map(|t| t.authorized(class)) {
        log::warn!(
            "node server: {full}; refusing a connection of {}",
            user.username
        );
        return Reply::Refuse(Response::text(503, "Too many connections"));
    }
    routes::dispatch(shared, req, transport, buf)
}
