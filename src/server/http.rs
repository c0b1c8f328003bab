//! HTTP/1.1 framing for the node server: reading one request head with `httparse`
//! under size and time limits, query and path decoding, and writing whole or chunked
//! responses. Runs on connection threads; no state beyond the caller's buffer.
//!
//! Invariants: a request head never grows past `max_header_bytes`; a body is read only
//! when it is at most `max_body_bytes` and announced by Content-Length (chunked request
//! bodies are refused); bytes that arrived after the request stay in the buffer for
//! the next request or for a proxied stream.

use std::io::{self, Read, Write};
use std::time::Instant;

/// Most headers a request may carry.
const MAX_HEADERS: usize = 64;

/// A parsed request.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: String,
    /// The path as sent (still percent-encoded), without the query.
    pub raw_path: String,
    /// The raw query string after `?`.
    pub raw_query: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// HTTP/1.0 clients get `Connection: close` semantics.
    pub http10: bool,
}

impl Request {
    /// A header's value (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first value of a query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a (repeatable) query parameter.
    pub fn params<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.query
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// True when the client asked to close the connection after this request.
    pub fn wants_close(&self) -> bool {
        let close = self
            .header("connection")
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
        close || self.http10
    }

    /// True for a connection upgrade (SPDY or WebSocket streams).
    pub fn is_upgrade(&self) -> bool {
        self.header("connection").is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        }) && self.header("upgrade").is_some()
    }
}

/// Why no request could be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The client closed the connection between requests.
    #[error("connection closed")]
    Closed,
    /// The client sent something that is not HTTP/1.1; answer 400 and close.
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("request head larger than {0} bytes")]
    HeadTooLarge(usize),
    #[error("request body larger than {0} bytes")]
    BodyTooLarge(usize),
    /// The time limit passed (slow or idle client).
    #[error("timed out reading the request")]
    TimedOut,
    #[error("read request: {0}")]
    Io(#[from] io::Error),
}

/// Limits of one request read.
#[derive(Clone, Copy, Debug)]
pub struct ReadLimits {
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Reads one request from `r`, keeping leftover bytes in `buf`. `set_deadline` is
/// called before each read with the time left, so a client that trickles bytes still
/// meets the overall deadline.
#[inline(never)]
pub fn read_request(
    r: &mut impl Read,
    buf: &mut Vec<u8>,
    limits: ReadLimits,
    deadline: Instant,
    set_deadline: &mut dyn FnMut(std::time::Duration) -> io::Result<()>,
) -> Result<Request, ReadError> {
    let mut chunk = [0u8; 4096];
    // Bytes already known to hold no end of head: with heads up to 1 MiB, parsing
    // again after every 4 KiB read would be quadratic.
    let mut scanned = 0;
    let (mut req, head_len, body_len) = loop {
        if may_hold_head(buf, scanned) {
            if let Some(parsed) = parse_head(buf)? {
                break parsed;
            }
        }
        scanned = buf.len();
        if buf.len() >= limits.max_header_bytes {
            return Err(ReadError::HeadTooLarge(limits.max_header_bytes));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::TimedOut);
        }
        set_deadline(left)?;
        let n = match r.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Err(ReadError::Closed),
            Ok(0) => return Err(ReadError::Malformed("connection closed mid-request".into())),
            Ok(n) => n,
            Err(e) if is_timeout(&e) => return Err(ReadError::TimedOut),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && buf.is_empty() => {
                return Err(ReadError::Closed)
            }
            Err(e) => return Err(ReadError::Io(e)),
        };
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_len > limits.max_header_bytes {
        return Err(ReadError::HeadTooLarge(limits.max_header_bytes));
    }
    if body_len > limits.max_body_bytes {
        return Err(ReadError::BodyTooLarge(limits.max_body_bytes));
    }
    buf.drain(..head_len);
    while buf.len() < body_len {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::TimedOut);
        }
        set_deadline(left)?;
        match r.read(&mut chunk) {
            Ok(0) => return Err(ReadError::Malformed("connection closed in the body".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => return Err(ReadError::TimedOut),
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    req.body = buf.drain(..body_len).collect();
    Ok(req)
}

/// True when `buf` may hold a complete head: a blank line ends in the bytes after
/// `scanned` (or the buffer is non-empty and was never scanned, so a malformed start
/// line is reported early).
fn may_hold_head(buf: &[u8], scanned: usize) -> bool {
    if scanned == 0 {
        return !buf.is_empty();
    }
    let from = scanned.saturating_sub(3);
    buf[from..].windows(2).any(|w| w == b"\n\n" || w == b"\n\r")
}

/// Parses a complete head: the request, the head's length and the body's length.
fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize, usize)>, ReadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(ReadError::Malformed(e.to_string())),
    };
    let method = parsed.method.unwrap_or("").to_owned();
    let target = parsed.path.unwrap_or("");
    if !target.starts_with('/') {
        return Err(ReadError::Malformed(format!(
            "request target {target:?} is not an absolute path"
        )));
    }
    let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = Request {
        method,
        raw_path: raw_path.to_owned(),
        raw_query: raw_query.to_owned(),
        query: parse_query(raw_query)?,
        headers: Vec::with_capacity(parsed.headers.len()),
        body: Vec::new(),
        http10: parsed.version == Some(0),
    };
    for h in parsed.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| ReadError::Malformed(format!("header {} is not UTF-8", h.name)))?;
        req.headers
            .push((h.name.to_owned(), value.trim().to_owned()));
    }
    if req.header("transfer-encoding").is_some() {
        return Err(ReadError::Malformed(
            "chunked request bodies are not supported".into(),
        ));
    }
    let body_len = match req.header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| ReadError::Malformed(format!("bad content-length {v:?}")))?,
    };
    Ok(Some((req, head_len, body_len)))
}

/// Splits and decodes a query string (`+` is a space, as in forms).
pub fn parse_query(q: &str) -> Result<Vec<(String, String)>, ReadError> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| {
                percent_decode(&s.replace('+', " "))
                    .ok_or_else(|| ReadError::Malformed(format!("bad query parameter {p:?}")))
            };
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

/// Decodes `%XX` escapes; None on a bad escape (`%` without two hex digits, which
/// the crate would pass through as it is) or bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let escapes_ok = s.split('%').skip(1).all(|after| {
        after
            .as_bytes()
            .get(..2)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if !escapes_ok {
        return None;
    }
    let text = percent_encoding::percent_decode_str(s).decode_utf8().ok()?;
    Some(text.into_owned())
}

/// A whole response.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type", content_type.to_owned())],
            body: body.into(),
        }
    }

    /// A plain-text answer; errors carry their message this way.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        let mut body = body.into();
        if !body.ends_with('\n') {
            body.push('\n');
        }
        Response::new(status, "text/plain; charset=utf-8", body)
    }

    pub fn json(status: u16, body: Vec<u8>) -> Response {
        Response::new(status, "application/json", body)
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

pub fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Writes a whole response; `close` adds `Connection: close`.
pub fn write_response(
    w: &mut impl Write,
    resp: &Response,
    close: bool,
    head_only: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("X-Content-Type-Options: nosniff\r\n");
    head.push_str(&format!("Content-Length: {}\r\n", resp.body.len()));
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(&resp.body);
    }
    w.write_all(&out)?;
    w.flush()
}

/// Starts a chunked 200 response; write the body with [`Chunked`].
pub fn start_chunked(w: &mut impl Write, content_type: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nX-Content-Type-Options: nosniff\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    w.write_all(head.as_bytes())?;
    w.flush()
}

/// Wraps a writer so each `write` becomes one chunk of a chunked body.
pub struct Chunked<'a, W: Write> {
    inner: &'a mut W,
}

impl<'a, W: Write> Chunked<'a, W> {
    pub fn new(inner: &'a mut W) -> Self {
        Chunked { inner }
    }

    /// Writes the terminating zero-length chunk.
    pub fn finish(self) -> io::Result<()> {
        self.inner.write_all(b"0\r\n\r\n")?;
        self.inner.flush()
    }
}

impl<W: Write> Write for Chunked<'_, W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let mut frame = format!("{:x}\r\n", data.len()).into_bytes();
        frame.extend_from_slice(data);
        frame.extend_from_slice(b"\r\n");
        self.inner.write_all(&frame)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const LIMITS: ReadLimits = ReadLimits {
        max_header_bytes: 256,
        max_body_bytes: 8,
    };

    fn read(input: &[u8]) -> (Result<Request, ReadError>, Vec<u8>) {
        let mut r = input;
        let mut buf = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let res = read_request(&mut r, &mut buf, LIMITS, deadline, &mut |_| Ok(()));
        (res, buf)
    }

    #[test]
    fn request_with_query_and_leftover() {
        let (req, rest) =
            read(b"GET /containerLogs/a/b/c?tailLines=5&x=a%20b+c HTTP/1.1\r\nHost: h\r\n\r\nNEXT");
        let req = req.unwrap();
        assert_eq!(req.method, "GET");
        assert_eq!(req.raw_path, "/containerLogs/a/b/c");
        assert_eq!(req.param("tailLines"), Some("5"));
        assert_eq!(req.param("x"), Some("a b c"));
        assert_eq!(req.header("HOST"), Some("h"));
        assert_eq!(rest, b"NEXT");
    }

    /// Hands out at most `step` bytes per read, as a slow client's packets.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_head_split_across_reads_at_any_point_is_found() {
        let head = b"GET /pods HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\nNEXT";
        for step in 1..8 {
            let mut r = Trickle { data: head, step };
            let mut buf = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(5);
            let req = read_request(&mut r, &mut buf, LIMITS, deadline, &mut |_| Ok(()));
            assert_eq!(req.unwrap().header("x-a"), Some("1"), "step {step}");
            assert!(b"NEXT".starts_with(&buf), "step {step}");
        }
    }

    #[test]
    fn body_limits_and_framing() {
        let (req, _) = read(b"POST /run HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
        assert_eq!(req.unwrap().body, b"abc");
        let (err, _) = read(b"POST /run HTTP/1.1\r\nContent-Length: 100\r\n\r\n");
        assert!(matches!(err, Err(ReadError::BodyTooLarge(8))));
        let (err, _) = read(b"POST /run HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(matches!(err, Err(ReadError::Malformed(_))));
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(400));
        let (err, _) = read(long.as_bytes());
        assert!(matches!(err, Err(ReadError::HeadTooLarge(256))));
        let (err, _) = read(b"\x16\x03\x01garbage\r\n\r\n");
        assert!(matches!(err, Err(ReadError::Malformed(_))));
        let (err, _) = read(b"");
        assert!(matches!(err, Err(ReadError::Closed)));
        let (err, _) = read(b"GET /%zz?a=%ff HTTP/1.1\r\n\r\n");
        assert!(matches!(err, Err(ReadError::Malformed(_))));
    }

    #[test]
    fn chunked_writer_frames() {
        let mut out = Vec::new();
        let mut c = Chunked::new(&mut out);
        c.write_all(b"hello").unwrap();
        c.finish().unwrap();
        assert_eq!(out, b"5\r\nhello\r\n0\r\n\r\n");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(percent_decode("%4"), None);
        assert_eq!(percent_decode("%C3%A9").as_deref(), Some("é"));
        assert_eq!(percent_decode("%2f%25+").as_deref(), Some("/%+"));
        // Escapes the crate alone would pass through as they are.
        for bad in ["%", "a%2", "%zz", "%é", "%%41", "x%4g"] {
            assert_eq!(percent_decode(bad), None, "{bad:?}");
        }
        // Well-formed escapes of bytes that are not UTF-8.
        assert_eq!(percent_decode("%C3"), None);
        assert_eq!(percent_decode("%FF%FE"), None);
    }
}
