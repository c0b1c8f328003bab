//! A stand-in for the kube-apiserver's part in `kubectl logs` and `kubectl exec`,
//! since no real API server can be installed here. It serves plain HTTP on
//! 127.0.0.1 and does what the API server does for these commands: static discovery
//! (`/api`, `/apis`, `/api/v1`), `GET` of the one pod, and the `pods/log` and
//! `pods/exec` subresources translated to the node's `/containerLogs` and `/exec`
//! paths (query names mapped as the API server maps them) and proxied over TLS with a
//! kubelet client certificate, byte for byte (upgrades included).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::https::{self, Identity};

/// Where the node is and how to reach it.
#[derive(Clone)]
pub struct Upstream {
    pub node: SocketAddr,
    pub server_ca: Vec<u8>,
    pub identity: Identity,
    pub pod: Value,
}

/// Starts the shim; returns its `http://` URL. It serves until the process ends.
pub fn start(upstream: Upstream) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let upstream = upstream.clone();
            std::thread::spawn(move || serve(conn, &upstream));
        }
    });
    url
}

fn reply(w: &mut TcpStream, code: u16, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        w,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

fn discovery(path: &str) -> Option<Value> {
    match path {
        "/api" => Some(json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})),
        "/apis" => Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})),
        "/api/v1" => Some(
            json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
             "verbs": ["get", "list"], "shortNames": ["po"]},
            {"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]},
            {"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions",
             "verbs": ["create", "get"]}]}),
        ),
        "/version" => Some(json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-shim"})),
        _ => None,
    }
}

/// The node path for a pod subresource request, with the query renamed.
fn node_path(path: &str, query: &str, ns: &str, pod: &str) -> Option<String> {
    let base = format!("/api/v1/namespaces/{ns}/pods/{pod}/");
    let sub = path.strip_prefix(&base)?;
    let mut container = String::new();
    let mut out = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let truthy = if v == "true" || v == "1" { "1" } else { "0" };
        match (sub, k) {
            (_, "container") => container = v.to_owned(),
            ("exec", "stdin") => out.push(format!("input={truthy}")),
            ("exec", "stdout") => out.push(format!("output={truthy}")),
            ("exec", "stderr") => out.push(format!("error={truthy}")),
            _ => out.push(pair.to_owned()),
        }
    }
    let node = match sub {
        "log" => format!("/containerLogs/{ns}/{pod}/{container}"),
        "exec" => format!("/exec/{ns}/{pod}/{container}"),
        _ => return None,
    };
    Some(format!("{node}?{}", out.join("&")))
}

fn serve(conn: TcpStream, up: &Upstream) {
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end().to_owned();
            if h.is_empty() {
                break;
            }
            headers.push(h);
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let ns = up.pod["metadata"]["namespace"].as_str().unwrap_or("");
        let pod = up.pod["metadata"]["name"].as_str().unwrap_or("");
        if let Some(doc) = discovery(path) {
            reply(reader.get_mut(), 200, &doc);
        } else if path == format!("/api/v1/namespaces/{ns}/pods/{pod}") {
            reply(reader.get_mut(), 200, &up.pod);
        } else if let Some(node) = node_path(path, query, ns, pod) {
            proxy(reader, up, &method, &node, &headers);
            return;
        } else {
            reply(
                reader.get_mut(),
                404,
                &json!({"kind": "Status", "code": 404, "reason": "NotFound"}),
            );
        }
    }
}

/// Forwards one request to the node and pumps bytes both ways until either closes.
fn proxy(
    reader: BufReader<TcpStream>,
    up: &Upstream,
    method: &str,
    path: &str,
    headers: &[String],
) {
    let Ok(tls) = https::connect(up.node, &up.server_ca, Some(&up.identity)) else {
        return;
    };
    let upgrade = headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("upgrade:"));
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: node\r\n");
    for h in headers {
        let lower = h.to_ascii_lowercase();
        if lower.starts_with("host:")
            || lower.starts_with("authorization:")
            || (!upgrade && lower.starts_with("connection:"))
        {
            continue;
        }
        head.push_str(h);
        head.push_str("\r\n");
    }
    if !upgrade {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let tls = Arc::new(Mutex::new(tls));
    let _ = tls
        .lock()
        .unwrap()
        .sock
        .set_read_timeout(Some(Duration::from_millis(50)));
    let mut first = head.into_bytes();
    first.extend_from_slice(reader.buffer());
    {
        let mut t = tls.lock().unwrap();
        if t.write_all(&first).and_then(|()| t.flush()).is_err() {
            return;
        }
    }
    let mut client = reader.into_inner();
    let mut client_reader = client.try_clone().unwrap();
    let up_tls = tls.clone();
    // kubectl → node.
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match client_reader.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let mut t = up_tls.lock().unwrap();
                    if t.write_all(&buf[..n]).and_then(|()| t.flush()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    // node → kubectl.
    let mut buf = [0u8; 16 * 1024];
    loop {
        let read = tls.lock().unwrap().read(&mut buf);
        match read {
            Ok(0) => break,
            Ok(n) => {
                if client.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
}
