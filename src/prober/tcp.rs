//! TCP probes (upstream `pkg/probe/tcp`): healthy when a connection to host:port opens
//! within the timeout; the connection is closed at once.
//!
//! Runs on `probe-N` attempt threads. An IP address is dialled directly; a host name is
//! resolved with the system resolver first (that lookup is not bounded by the timeout,
//! as std has no resolver deadline; probes almost always name the pod IP).

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::Attempt;

/// Dials `host:port` within `timeout`.
pub fn probe(host: &str, port: u16, timeout: Duration) -> Attempt {
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => match (host, port).to_socket_addrs() {
            Ok(addrs) => addrs.collect(),
            Err(err) => return Attempt::Failure(format!("dial tcp {shown}: lookup: {err}")),
        },
    };
    let deadline = Instant::now() + timeout;
    let mut last = format!("dial tcp {shown}: no address");
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Attempt::Failure(format!("dial tcp {shown}: i/o timeout after {timeout:?}"));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => {
                drop(stream);
                return Attempt::Success(String::new());
            }
            Err(err) if err.kind() == std::io::ErrorKind::TimedOut => {
                last = format!("dial tcp {addr}: i/o timeout after {timeout:?}");
            }
            Err(err) => last = format!("dial tcp {addr}: {err}"),
        }
    }
    Attempt::Failure(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_and_closed_ports() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = Duration::from_secs(5);
        assert_eq!(probe("127.0.0.1", port, t), Attempt::Success(String::new()));
        assert_eq!(probe("localhost", port, t), Attempt::Success(String::new()));
        drop(listener);
        let Attempt::Failure(msg) = probe("127.0.0.1", port, t) else {
            panic!("a closed port is a failure");
        };
        assert!(
            msg.starts_with(&format!("dial tcp 127.0.0.1:{port}: ")),
            "{msg}"
        );
        assert!(msg.to_lowercase().contains("refused"), "{msg}");
    }
}
