//! `/exec`, `/attach` and `/portForward`: ask the runtime for a streaming URL (CRI
//! Exec, Attach, PortForward) and proxy the client's request to it, as upstream does
//! since the redirect mode was removed. The proxy is byte-transparent: the runtime's
//! streaming server answers the SPDY or WebSocket upgrade itself, and bytes are then
//! pumped both ways until either side closes, litelet shuts down or the stream is idle
//! for `stream_idle_timeout` (`streamingConnectionIdleTimeout`; zero: never). Plus
//! `/run` (POST, `cmd=`): ExecSync, output returned.
//!
//! Runs on the connection's thread; one poll over both sockets, so a stalled peer
//! holds only this thread (writes time out after `write_timeout`).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::cri::pb;
use crate::runtime::model::{ContainerState, SandboxState};
use crate::server::http::{Request, Response};
use crate::server::routes::container_logs::{
    bool_param, cri_error, find_pod, has_container, runtime_status,
};
use crate::server::routes::Target;
use crate::server::transport::{Reply, Transport};
use crate::server::Shared;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Headers never passed to the runtime's streaming server.
const HOP_HEADERS: &[&str] = &[
    "host",
    "authorization",
    "proxy-authorization",
    "proxy-connection",
    "keep-alive",
];

/// The stdin/stdout/stderr/tty flags (`input`, `output`, `error`, `tty`).
struct StreamFlags {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn stream_flags(req: &Request) -> Result<StreamFlags, Response> {
    let flags = StreamFlags {
        stdin: bool_param(req, "input")?,
        stdout: bool_param(req, "output")?,
        stderr: bool_param(req, "error")?,
        tty: bool_param(req, "tty")?,
    };
    if !(flags.stdin || flags.stdout || flags.stderr) {
        return Err(Response::text(
            400,
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    Ok(flags)
}

/// The ID of the running instance of the target container.
fn running_container(shared: &Shared, t: &Target) -> Result<String, Response> {
    let pod = find_pod(shared, t)?;
    if !has_container(&pod, &t.container) {
        return Err(Response::text(
            404,
            format!(
                "container \"{}\" not found in pod \"{}/{}\"",
                t.container, t.namespace, t.pod
            ),
        ));
    }
    let status = runtime_status(shared, &pod)?;
    let id = status
        .instances(&t.container)
        .find(|c| c.state == ContainerState::Running)
        .map(|c| c.id.clone());
    id.ok_or_else(|| Response::text(404, format!("container \"{}\" is not running", t.container)))
}

pub fn exec(
    shared: &Shared,
    req: &Request,
    t: &Target,
    transport: &mut Transport,
    buf: &mut Vec<u8>,
) -> Reply {
    let url = exec_url(shared, req, t);
    proxy_or_error(shared, req, url, transport, buf)
}

/// The runtime's streaming URL for a `exec` request (its own frame: a held
/// stream's thread keeps only the frames above the proxy loop).
#[inline(never)]
fn exec_url(shared: &Shared, req: &Request, t: &Target) -> Result<String, Response> {
    let flags = stream_flags(req)?;
    let cmd: Vec<String> = req.params("command").map(str::to_owned).collect();
    if cmd.is_empty() {
        return Err(Response::text(
            400,
            "you must specify at least one command for the container",
        ));
    }
    let id = running_container(shared, t)?;
    let request = pb::ExecRequest {
        container_id: id,
        cmd,
        tty: flags.tty,
        stdin: flags.stdin,
        stdout: flags.stdout,
        stderr: flags.stderr && !flags.tty,
        ..Default::default()
    };
    shared
        .ctx
        .runtime
        .exec(&request)
        .map(|r| r.url)
        .map_err(|e| cri_error(&e))
}

pub fn attach(
    shared: &Shared,
    req: &Request,
    t: &Target,
    transport: &mut Transport,
    buf: &mut Vec<u8>,
) -> Reply {
    let url = attach_url(shared, req, t);
    proxy_or_error(shared, req, url, transport, buf)
}

/// The runtime's streaming URL for a `attach` request (its own frame: a held
/// stream's thread keeps only the frames above the proxy loop).
#[inline(never)]
fn attach_url(shared: &Shared, req: &Request, t: &Target) -> Result<String, Response> {
    let flags = stream_flags(req)?;
    let request = pb::AttachRequest {
        container_id: running_container(shared, t)?,
        stdin: flags.stdin,
        tty: flags.tty,
        stdout: flags.stdout,
        stderr: flags.stderr && !flags.tty,
        ..Default::default()
    };
    shared
        .ctx
        .runtime
        .attach(&request)
        .map(|r| r.url)
        .map_err(|e| cri_error(&e))
}

pub fn port_forward(
    shared: &Shared,
    req: &Request,
    t: &Target,
    transport: &mut Transport,
    buf: &mut Vec<u8>,
) -> Reply {
    let url = port_forward_url(shared, req, t);
    proxy_or_error(shared, req, url, transport, buf)
}

/// The runtime's streaming URL for a `port_forward` request (its own frame: a held
/// stream's thread keeps only the frames above the proxy loop).
#[inline(never)]
fn port_forward_url(shared: &Shared, req: &Request, t: &Target) -> Result<String, Response> {
    let mut ports = Vec::new();
    for p in req.params("port") {
        match p.parse::<u16>() {
            Ok(port) if port > 0 => ports.push(i32::from(port)),
            _ => return Err(Response::text(400, format!("invalid port {p:?}"))),
        }
    }
    let pod = find_pod(shared, t)?;
    let status = runtime_status(shared, &pod)?;
    let sandbox = status
        .sandboxes
        .iter()
        .find(|s| s.state == SandboxState::Ready)
        .ok_or_else(|| {
            Response::text(
                404,
                format!("pod \"{}/{}\" has no ready sandbox", t.namespace, t.pod),
            )
        })?;
    let request = pb::PortForwardRequest {
        pod_sandbox_id: sandbox.id.clone(),
        port: ports,
        ..Default::default()
    };
    shared
        .ctx
        .runtime
        .port_forward(&request)
        .map(|r| r.url)
        .map_err(|e| cri_error(&e))
}

/// `/run`: runs `cmd` (split on whitespace) with ExecSync and answers its output.
#[inline(never)]
pub fn run(shared: &Shared, req: &Request, t: &Target) -> Response {
    let result = (|| {
        let cmd: Vec<String> = req
            .param("cmd")
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if cmd.is_empty() {
            return Err(Response::text(400, "missing cmd parameter"));
        }
        let request = pb::ExecSyncRequest {
            container_id: running_container(shared, t)?,
            cmd,
            ..Default::default()
        };
        shared
            .ctx
            .runtime
            .exec_sync(&request)
            .map_err(|e| cri_error(&e))
    })();
    match result {
        Ok(out) => {
            let mut body = out.stdout;
            body.extend_from_slice(&out.stderr);
            if out.exit_code == 0 {
                Response::new(200, "text/plain; charset=utf-8", body)
            } else {
                body.extend_from_slice(
                    format!("command terminated with exit code {}\n", out.exit_code).as_bytes(),
                );
                Response::new(500, "text/plain; charset=utf-8", body)
            }
        }
        Err(resp) => resp,
    }
}

fn proxy_or_error(
    shared: &Shared,
    req: &Request,
    url: Result<String, Response>,
    transport: &mut Transport,
    buf: &mut Vec<u8>,
) -> Reply {
    match url {
        // Upstream's streaming server refuses a request that asks for no SPDY or
        // WebSocket upgrade with 400; proxying it would answer whatever the runtime
        // makes of a plain request (an empty 200 from containerd).
        Ok(_) if !req.is_upgrade() => Reply::Full(Response::text(
            400,
            "unable to upgrade: missing upgrade headers in request",
        )),
        Ok(url) => proxy(shared, req, &url, transport, buf),
        Err(resp) => Reply::Full(resp),
    }
}

/// A streaming URL from the runtime that litelet will not proxy to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamUrlError {
    #[error("unsupported streaming url {0:?} (only http:// is proxied)")]
    Scheme(String),
    #[error("bad streaming url {0:?}")]
    Authority(String),
}

/// `(host:port, path and query)` of an `http://` streaming URL.
pub fn split_url(url: &str) -> Result<(String, String), StreamUrlError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| StreamUrlError::Scheme(url.to_owned()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(StreamUrlError::Authority(url.to_owned()));
    }
    let authority = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path.to_owned()))
}

/// The request head sent to the streaming server (pure).
pub fn backend_head(req: &Request, authority: &str, path: &str) -> String {
    let target = if path.contains('?') || req.raw_query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", req.raw_query)
    };
    let upgrade = req.is_upgrade();
    let mut head = format!("{} {target} HTTP/1.1\r\nHost: {authority}\r\n", req.method);
    for (k, v) in &req.headers {
        let lower = k.to_ascii_lowercase();
        if HOP_HEADERS.contains(&lower.as_str()) || (!upgrade && lower == "connection") {
            continue;
        }
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !upgrade {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    head
}

fn proxy(
    shared: &Shared,
    req: &Request,
    url: &str,
    transport: &mut Transport,
    buf: &mut Vec<u8>,
) -> Reply {
    let (authority, path) = match split_url(url) {
        Ok(parts) => parts,
        Err(err) => return Reply::Full(Response::text(502, err.to_string())),
    };
    let backend = authority
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| io::Error::other("cannot resolve"))
        .and_then(|addr: SocketAddr| TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT));
    let mut backend = match backend {
        Ok(b) => b,
        Err(err) => {
            return Reply::Full(Response::text(
                502,
                format!("cannot reach the runtime's streaming server: {err}"),
            ))
        }
    };
    let _ = backend.set_nodelay(true);
    let _ = backend.set_write_timeout(Some(shared.config.limits.write_timeout));
    let mut first = backend_head(req, &authority, &path).into_bytes();
    first.extend_from_slice(&req.body);
    first.append(buf);
    if let Err(err) = backend.write_all(&first) {
        return Reply::Full(Response::text(
            502,
            format!("cannot reach the runtime's streaming server: {err}"),
        ));
    }
    if let Err(err) = pump(shared, transport, &mut backend) {
        log::debug!("stream proxy to {authority} ended: {err}");
    }
    let _ = backend.shutdown(Shutdown::Both);
    Reply::Streamed { close: true }
}

/// Copies bytes both ways until the backend closes (or the client and then the
/// backend), shutdown, an error, or the idle limit.
fn pump(shared: &Shared, client: &mut Transport, backend: &mut TcpStream) -> io::Result<()> {
    let idle_limit = shared.config.limits.stream_idle_timeout;
    let mut last = Instant::now();
    let mut client_open = true;
    // One TLS record's worth: a read never returns more plaintext than that.
    let mut data = vec![0u8; 16 * 1024];
    let client_sock = client.socket().try_clone()?;
    let backend_sock = backend.try_clone()?;
    crate::server::settle_stack();
    loop {
        let idle = !idle_limit.is_zero() && last.elapsed() >= idle_limit;
        if shared.stopping.load(Ordering::Relaxed) || idle {
            return Ok(());
        }
        if client_open {
            let n = client.buffered(&mut data)?;
            if n > 0 {
                backend.write_all(&data[..n])?;
                last = Instant::now();
                continue;
            }
        }
        let interest = PollFlags::POLLIN;
        let mut fds = vec![PollFd::new(backend_sock.as_fd(), interest)];
        if client_open {
            fds.push(PollFd::new(client_sock.as_fd(), interest));
        }
        match nix::poll::poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let backend_ready = ready(&fds[0]);
        let client_ready = client_open && ready(&fds[1]);
        drop(fds);
        if client_ready {
            match client.read(&mut data) {
                Ok(0) => {
                    client_open = false;
                    let _ = backend.shutdown(Shutdown::Write);
                }
                Ok(n) => {
                    backend.write_all(&data[..n])?;
                    last = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    client_open = false;
                    let _ = backend.shutdown(Shutdown::Write);
                }
            }
        }
        if backend_ready {
            match backend.read(&mut data) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    client.write_all(&data[..n])?;
                    client.flush()?;
                    last = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::http::parse_query;

    #[test]
    fn streaming_urls() {
        assert_eq!(
            split_url("http://127.0.0.1:1234/exec/abc").unwrap(),
            ("127.0.0.1:1234".into(), "/exec/abc".into())
        );
        assert_eq!(split_url("http://[::1]:9/x").unwrap().0, "[::1]:9");
        assert_eq!(
            split_url("http://host").unwrap(),
            ("host:80".into(), "/".into())
        );
        assert!(split_url("https://127.0.0.1:1/x").is_err());
        assert!(split_url("/exec/abc").is_err());
        assert!(split_url("http://u@h:1/x").is_err());
    }

    #[test]
    fn backend_head_drops_credentials_and_keeps_upgrade() {
        let req = Request {
            method: "POST".into(),
            raw_query: "command=echo&output=1".into(),
            query: parse_query("command=echo&output=1").unwrap(),
            headers: vec![
                ("Host".into(), "node:10250".into()),
                ("Authorization".into(), "Bearer secret".into()),
                ("Connection".into(), "Upgrade".into()),
                ("Upgrade".into(), "SPDY/3.1".into()),
                (
                    "X-Stream-Protocol-Version".into(),
                    "v4.channel.k8s.io".into(),
                ),
            ],
            ..Default::default()
        };
        let head = backend_head(&req, "127.0.0.1:5", "/exec/tok");
        assert!(
            head.starts_with(
                "POST /exec/tok?command=echo&output=1 HTTP/1.1\r\nHost: 127.0.0.1:5\r\n"
            ),
            "{head}"
        );
        assert!(
            !head.contains("secret") && !head.contains("node:10250"),
            "{head}"
        );
        assert!(
            head.contains("Connection: Upgrade\r\n") && head.contains("Upgrade: SPDY/3.1\r\n"),
            "{head}"
        );
        assert!(head.ends_with("\r\n\r\n"));
        let plain = Request {
            method: "GET".into(),
            headers: vec![("Connection".into(), "keep-alive".into())],
            ..Default::default()
        };
        let head = backend_head(&plain, "h:1", "/x?y=1");
        assert!(
            head.contains("Connection: close\r\n") && !head.contains("keep-alive"),
            "{head}"
        );
    }
}
