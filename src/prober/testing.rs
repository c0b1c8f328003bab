//! Test helpers: a tiny HTTP/1.1 server on loopback whose answers are scripted by path,
//! one thread per connection. Test-only.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the server answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A status line code and a body.
    Status(u16, String),
    /// A redirect with this code and `Location`.
    Redirect(u16, String),
    /// Reads the request and never answers (the socket stays open for a minute).
    Hang,
    /// Sends a 200 with an endless body until the client goes away.
    Endless,
}

/// A running server; it stops accepting when dropped (threads end with their sockets).
pub struct TestHttp {
    pub port: u16,
    /// Request heads seen so far (request line and headers, lower-cased names).
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl TestHttp {
    pub fn start(route: fn(&str, u16) -> Reply) -> TestHttp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || serve(stream, route, port, &log));
            }
        });
        TestHttp { port, seen }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

fn serve(stream: TcpStream, route: fn(&str, u16) -> Reply, port: u16, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    log.lock().unwrap().push(head);
    let mut stream = stream;
    match route(&path, port) {
        Reply::Status(code, body) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Reply::Redirect(code, location) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\nlocation: {location}\r\ncontent-length: 5\r\nconnection: close\r\n\r\nmoved"
            );
        }
        Reply::Hang => std::thread::sleep(Duration::from_secs(60)),
        Reply::Endless => {
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n"
            );
            let chunk = vec![b'x'; 64 * 1024];
            while stream.write_all(&chunk).is_ok() {}
        }
    }
}
