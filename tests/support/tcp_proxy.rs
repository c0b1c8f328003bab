//! A TCP proxy a test can cut: litelet's kubeconfig points through it at the shared
//! control plane (which other tests use and so cannot be stopped), and `cut()` plays
//! a lost link: every open connection is shut down and new ones are accepted and
//! closed at once, so clients see resets and EOFs as they would over a dead uplink.
//! `restore()` lets connections through again. `hold()` keeps new connections
//! waiting, accepted but not yet forwarded, until `release()` (a slow upstream whose
//! clients are stuck mid-request); `accepted()` counts the connections so far.
//! Threads: `proxy-accept` plus one per connection (two while copying); all end with
//! the process (test binaries are short-lived).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

pub struct TcpProxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    gate: Arc<Gate>,
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
        let (c, o, g) = (cut.clone(), open.clone(), gate.clone());
        std::thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || {
                for client in listener.incoming().flatten() {
                    g.accepted.fetch_add(1, Ordering::SeqCst);
                    if c.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let (o, g) = (o.clone(), g.clone());
                    let _ = std::thread::Builder::new()
                        .name("proxy-conn".into())
                        .spawn(move || forward(client, target, &o, &g));
                }
            })
            .expect("proxy thread");
        TcpProxy {
            addr,
            cut,
            open,
            gate,
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
fn forward(client: TcpStream, target: SocketAddr, open: &Mutex<Vec<TcpStream>>, gate: &Gate) {
    gate.wait_open();
    let Ok(server) = TcpStream::connect(target) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
        let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
        open.push(c2);
        open.push(s2);
    }
    pipe(&client, &server);
    pipe(&server, &client);
}

/// Copies `from` → `to` on a thread until either side ends.
fn pipe(from: &TcpStream, to: &TcpStream) {
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
