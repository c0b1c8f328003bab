//! A TCP proxy a test can cut: litelet's kubeconfig points through it at the shared
//! control plane (which other tests use and so cannot be stopped), and `cut()` plays
//! a lost link: every open connection is shut down and new ones are accepted and
//! closed at once, so clients see resets and EOFs as they would over a dead uplink.
//! `restore()` lets connections through again. `hold()` keeps new connections
//! waiting, accepted but not yet forwarded, until `release()` (a slow upstream whose
//! clients are stuck mid-request); `accepted()` counts the connections so far.
//! `traffic()` counts the bytes carried each way (TLS and HTTP overhead included):
//! the side-by-side benchmark's measure of what a node sends and receives over its
//! uplink.
//! Threads: `proxy-accept` plus one per connection (two while copying); all end with
//! the process (test binaries are short-lived).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

pub struct TcpProxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    gate: Arc<Gate>,
    traffic: Arc<Traffic>,
}

/// Bytes carried so far, and connections forwarded.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Client → target (what the node sends).
    pub sent: AtomicU64,
    /// Target → client (what the node receives).
    pub received: AtomicU64,
    pub connections: AtomicU64,
}

/// A reading of [`Traffic`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficSample {
    pub sent: u64,
    pub received: u64,
    pub connections: u64,
}

impl TrafficSample {
    /// What was carried between `earlier` and this reading.
    pub fn since(&self, earlier: &TrafficSample) -> TrafficSample {
        TrafficSample {
            sent: self.sent - earlier.sent,
            received: self.received - earlier.received,
            connections: self.connections - earlier.connections,
        }
    }
}

/// Held (true) or not, and a way to wake the connections waiting on it.
#[derive(Default)]
struct Gate {
    held: Mutex<bool>,
    changed: Condvar,
    accepted: AtomicUsize,
}

impl Gate {
    fn wait_open(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while *held {
            held = self.changed.wait(held).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set(&self, held: bool) {
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = held;
        self.changed.notify_all();
    }
}

impl TcpProxy {
    /// Listens on 127.0.0.1 (a port of its own) and forwards to `target`.
    pub fn start(target: SocketAddr) -> TcpProxy {
        Self::start_on("127.0.0.1:0", target)
    }

    /// Listens on `listen` (e.g. a node address and port) and forwards to `target`.
    pub fn start_on(listen: &str, target: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind(listen).expect("proxy listen");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Gate::default());
        let traffic = Arc::new(Traffic::default());
        let (c, o, g, t) = (cut.clone(), open.clone(), gate.clone(), traffic.clone());
        std::thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || {
                for client in listener.incoming().flatten() {
                    g.accepted.fetch_add(1, Ordering::SeqCst);
                    if c.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let (o, g, t) = (o.clone(), g.clone(), t.clone());
                    let _ = std::thread::Builder::new()
                        .name("proxy-conn".into())
                        .spawn(move || forward(client, target, &o, &g, t));
                }
            })
            .expect("proxy thread");
        TcpProxy {
            addr,
            cut,
            open,
            gate,
            traffic,
        }
    }

    /// The bytes and connections carried so far.
    pub fn traffic(&self) -> TrafficSample {
        TrafficSample {
            sent: self.traffic.sent.load(Ordering::Relaxed),
            received: self.traffic.received.load(Ordering::Relaxed),
            connections: self.traffic.connections.load(Ordering::Relaxed),
        }
    }

    /// Keeps new connections waiting (accepted, not forwarded) until [`Self::release`].
    pub fn hold(&self) {
        self.gate.set(true);
    }

    /// Forwards the held connections and every new one.
    pub fn release(&self) {
        self.gate.set(false);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.gate.accepted.load(Ordering::SeqCst)
    }

    /// `https://127.0.0.1:<port>` of the proxy.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Drops the link: open connections are shut down, new ones closed at once.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for s in open.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Waits for the gate, then connects to `target` and copies both ways.
fn forward(
    client: TcpStream,
    target: SocketAddr,
    open: &Mutex<Vec<TcpStream>>,
    gate: &Gate,
    traffic: Arc<Traffic>,
) {
    gate.wait_open();
    let Ok(server) = TcpStream::connect(target) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    traffic.connections.fetch_add(1, Ordering::Relaxed);
    if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
        let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
        open.push(c2);
        open.push(s2);
    }
    pipe(&client, &server, traffic.clone(), Direction::Sent);
    pipe(&server, &client, traffic, Direction::Received);
}

#[derive(Clone, Copy)]
enum Direction {
    Sent,
    Received,
}

/// Copies `from` → `to` on a thread until either side ends, counting the bytes.
fn pipe(from: &TcpStream, to: &TcpStream, traffic: Arc<Traffic>, direction: Direction) {
    let counter = move |n: usize| {
        let c = match direction {
            Direction::Sent => &traffic.sent,
            Direction::Received => &traffic.received,
        };
        c.fetch_add(n as u64, Ordering::Relaxed);
    };
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("proxy-copy".into())
        .spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        counter(n);
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
}
