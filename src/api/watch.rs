//! `WatchStream`: the events of one watch request, read line by line.
//!
//! The API server answers a watch with a chunked body of newline-delimited JSON
//! objects `{"type": ..., "object": ...}`. The stream yields each as a
//! [`WatchEvent`] (object left undecoded), ends (`None`) when the server ends the
//! body, and yields one final error when the connection breaks, a line is not JSON, or
//! the server sends an ERROR event (its `Status` mapped to an [`ApiError`]; code 410
//! becomes [`ApiError::Gone`]). After an error the stream is finished.
//!
//! Owned and read by one thread (the one that called `ApiClient::watch`); a read
//! blocks until the next line arrives. To wake it from elsewhere, close the client's
//! connections (`ApiClient::close_connections`).

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use crate::api::error::{ApiError, DecodeError, TransportError};
use crate::api::meta::{Status, WatchEvent, WatchEventType};
use crate::api::stats::Verb;

/// Longest event line accepted (a pod is a few KiB; this bounds a broken server).
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// An iterator over the events of one watch.
pub struct WatchStream {
    reader: BufReader<Box<dyn Read + Send>>,
    path: String,
    line: Vec<u8>,
    finished: bool,
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("path", &self.path)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl WatchStream {
    /// Reads events from `body` (the decoded HTTP body) of a watch on `path`.
    pub fn new(body: impl Read + Send + 'static, path: &str) -> Self {
        Self {
            reader: BufReader::with_capacity(64 * 1024, Box::new(body)),
            path: path.to_owned(),
            line: Vec::new(),
            finished: false,
        }
    }

    /// The watched collection's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn fail(&mut self, err: ApiError) -> Option<Result<WatchEvent, ApiError>> {
        self.finished = true;
        Some(Err(err))
    }
}

impl Iterator for WatchStream {
    type Item = Result<WatchEvent, ApiError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        loop {
            self.line.clear();
            match read_line(&mut self.reader, &mut self.line, MAX_LINE_BYTES) {
                Ok(0) => {
                    self.finished = true;
                    return None;
                }
                Ok(_) => {}
                Err(e) => {
                    let err = if e.kind() == std::io::ErrorKind::InvalidData {
                        ApiError::Decode {
                            path: self.path.clone(),
                            source: DecodeError::WatchLine(Arc::new(e)),
                        }
                    } else {
                        ApiError::Transport {
                            verb: Verb::Watch,
                            path: self.path.clone(),
                            source: TransportError::WatchRead(Arc::new(e)),
                        }
                    };
                    return self.fail(err);
                }
            }
            let text = self.line.trim_ascii();
            if text.is_empty() {
                continue;
            }
            let event: WatchEvent = match serde_json::from_slice(text) {
                Ok(ev) => ev,
                Err(e) => {
                    let err = ApiError::Decode {
                        path: self.path.clone(),
                        source: DecodeError::WatchEvent(Arc::new(e)),
                    };
                    return self.fail(err);
                }
            };
            if event.type_ == WatchEventType::Error {
                let status = event.decode::<Status>().unwrap_or_else(|_| Status {
                    message: Some(event.object.to_string()),
                    ..Status::default()
                });
                let err = ApiError::from_watch_status(&self.path, status);
                return self.fail(err);
            }
            return Some(Ok(event));
        }
    }
}

/// Appends one line (through its `\n`, or to end of input) to `out`; returns the bytes
/// read, 0 at end of input. A line longer than `max` is an `InvalidData` error.
fn read_line(r: &mut impl BufRead, out: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let (done, used) = {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(total);
            }
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    out.extend_from_slice(&buf[..=i]);
                    (true, i + 1)
                }
                None => {
                    out.extend_from_slice(buf);
                    (false, buf.len())
                }
            }
        };
        r.consume(used);
        total += used;
        if out.len() > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("watch event line longer than {max} bytes"),
            ));
        }
        if done {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    fn stream(text: &str) -> WatchStream {
        WatchStream::new(Cursor::new(text.as_bytes().to_vec()), "/api/v1/pods")
    }

    #[test]
    fn yields_events_then_ends() {
        let body = concat!(
            r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}"#,
            "\n\n",
            r#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}"#,
            "\n",
            r#"{"type":"DELETED","object":{"metadata":{"name":"a"}}}"#,
        );
        let events: Vec<_> = stream(body).collect();
        assert_eq!(events.len(), 3);
        let types: Vec<_> = events
            .iter()
            .map(|e| e.as_ref().unwrap().type_.clone())
            .collect();
        assert_eq!(
            types,
            [
                WatchEventType::Added,
                WatchEventType::Bookmark,
                WatchEventType::Deleted
            ]
        );
    }

    #[test]
    fn error_event_410_is_gone_and_ends_the_stream() {
        let body = concat!(
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 3 (10)","reason":"Expired","code":410}}"#,
            "\n",
            r#"{"type":"ADDED","object":{}}"#,
            "\n"
        );
        let mut s = stream(body);
        let e = s.next().unwrap().unwrap_err();
        assert!(e.is_gone(), "{e}");
        assert!(e.to_string().contains("too old resource version"), "{e}");
        assert!(s.next().is_none());
    }

    #[test]
    fn other_error_event_keeps_its_code() {
        let body = r#"{"type":"ERROR","object":{"kind":"Status","code":500,"reason":"InternalError","message":"etcd"}}"#;
        let e = stream(body).next().unwrap().unwrap_err();
        assert_eq!(e.status_code(), Some(500));
    }

    #[test]
    fn garbage_line_is_a_decode_error() {
        let mut s = stream("not json\n");
        assert!(matches!(s.next(), Some(Err(ApiError::Decode { .. }))));
        assert!(s.next().is_none());
    }

    #[test]
    fn long_lines_are_refused() {
        let mut buf = Cursor::new(vec![b'x'; 100]);
        let mut out = Vec::new();
        let e = read_line(&mut BufReader::with_capacity(8, &mut buf), &mut out, 50).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }

    /// A reader that fails after its data, like a connection dropped mid-stream.
    struct Broken(Cursor<Vec<u8>>);

    impl Read for Broken {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(std::io::ErrorKind::ConnectionReset.into()),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn broken_connection_is_a_transport_error() {
        let body = b"{\"type\":\"ADDED\",\"object\":{}}\n{\"type\":\"MOD".to_vec();
        let mut s = WatchStream::new(Broken(Cursor::new(body)), "/p");
        assert!(s.next().unwrap().is_ok());
        let e = s.next().unwrap().unwrap_err();
        assert!(matches!(e, ApiError::Transport { .. }), "{e}");
        assert!(s.next().is_none());
    }
}
