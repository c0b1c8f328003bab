//! Cuts the byte stream of a bus connection into whole messages, holding at most one
//! message of at most `max_message` bytes: a longer one is passed over as its bytes
//! arrive (they and its file descriptors are dropped), never buffered, so a peer's
//! 32 MiB message costs litelet one read buffer. Pure: the connection pushes what
//! each read brought and takes frames out. Owned by the connection's thread.
//!
//! File descriptors come with the first bytes of the message that carries them (the
//! bus sends each message's descriptors with its start), so they queue in order and
//! each whole message takes as many as its header announces. A message passed over
//! owns every descriptor queued when it is found (the messages before it took
//! theirs) and every one that comes with a read it swallows whole.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;

use super::message::{decode_header, header_len, message_len, Message};
use super::DbusError;

/// The header of an oversized message is read for the log only when it is this small.
const MAX_LOGGED_HEADER: usize = 64 * 1024;

/// Capacity the buffer keeps between messages.
const KEPT_CAPACITY: usize = 64 * 1024;

/// One message cut from the stream.
#[derive(Debug)]
pub enum Frame {
    /// A whole message's bytes; its descriptors are taken with [`Framer::take_fds`].
    Message(Vec<u8>),
    /// A message longer than the bound, passed over: its length, and its header when
    /// it had arrived whole (for the log line, and to fail the call it answers).
    Oversized { len: usize, header: Option<Message> },
}

/// The read side of a connection: bytes and descriptors not yet cut into messages.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
    /// Bytes of an oversized message still to pass over.
    skip: usize,
    max_message: usize,
    /// The most the buffer ever held (capacity), for the connection's statistics.
    peak: usize,
}

impl Framer {
    /// A framer that passes over messages longer than `max_message` bytes.
    pub fn new(max_message: usize) -> Framer {
        Framer {
            buf: Vec::new(),
            fds: VecDeque::new(),
            skip: 0,
            max_message,
            peak: 0,
        }
    }

    /// Adds what one read brought.
    pub fn push(&mut self, mut data: &[u8], fds: Vec<OwnedFd>) {
        if self.skip > 0 {
            let passed = self.skip.min(data.len());
            self.skip -= passed;
            data = &data[passed..];
            if data.is_empty() {
                // The read lies inside the message passed over: so do its descriptors.
                return;
            }
        }
        self.fds.extend(fds);
        self.buf.extend_from_slice(data);
        self.peak = self.peak.max(self.buf.capacity());
    }

    /// Bytes waiting to be cut.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// The buffer's capacity now, and the most it ever had.
    pub fn capacity(&self) -> (usize, usize) {
        (self.buf.capacity(), self.peak)
    }

    /// One `\r\n`-ended line of the authentication exchange, if whole.
    pub fn take_line(&mut self) -> Option<String> {
        let end = self.buf.windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 2);
        Some(line)
    }

    /// The next message, once its last byte has arrived; an oversized one as soon as
    /// its length is known. An error means the stream cannot be read on (a byte order
    /// mark or a length no bus sends).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, DbusError> {
        let Some(head) = self.buf.first_chunk::<16>().copied() else {
            return Ok(None);
        };
        let len = message_len(&head)?;
        if len > self.max_message {
            return Ok(Some(self.pass_over(&head, len)));
        }
        if self.buf.len() < len {
            return Ok(None);
        }
        let rest = self.buf.split_off(len);
        Ok(Some(Frame::Message(std::mem::replace(&mut self.buf, rest))))
    }

    fn pass_over(&mut self, head: &[u8; 16], len: usize) -> Frame {
        let header = header_len(head)
            .ok()
            .filter(|&h| h <= MAX_LOGGED_HEADER && h <= self.buf.len())
            .and_then(|h| decode_header(&self.buf[..h], MAX_LOGGED_HEADER * 4).ok())
            .map(|(m, _)| m);
        let here = self.buf.len().min(len);
        self.buf.drain(..here);
        self.skip = len - here;
        self.fds.clear();
        self.buf.shrink_to(KEPT_CAPACITY);
        Frame::Oversized { len, header }
    }

    /// The `n` descriptors of the message just cut.
    pub fn take_fds(&mut self, n: usize) -> Result<Vec<OwnedFd>, DbusError> {
        if self.fds.len() < n {
            return Err(DbusError::Protocol(format!(
                "message announces {n} file descriptors, {} came",
                self.fds.len()
            )));
        }
        Ok(self.fds.drain(..n).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dbus::Value;

    fn message(member: &str, payload: usize) -> Vec<u8> {
        Message::signal("/p", "org.example.I", member)
            .arg(Value::Bytes(vec![7; payload]))
            .encode(1)
            .unwrap()
    }

    fn fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    /// Cuts every frame there is now.
    fn frames(framer: &mut Framer) -> Vec<Frame> {
        std::iter::from_fn(|| framer.next_frame().unwrap()).collect()
    }

    #[test]
    fn messages_split_across_reads_come_out_whole_with_their_descriptors() {
        let (a, b) = (message("A", 10), message("B", 3000));
        let stream = [a.clone(), b.clone()].concat();
        let mut framer = Framer::new(1 << 20);
        for (i, piece) in stream.chunks(100).enumerate() {
            // A's descriptor comes with its first bytes.
            framer.push(piece, if i == 0 { vec![fd()] } else { vec![] });
            for frame in frames(&mut framer) {
                let Frame::Message(bytes) = frame else {
                    panic!("{frame:?}")
                };
                let n = if bytes == a { 1 } else { 0 };
                assert_eq!(framer.take_fds(n).unwrap().len(), n);
                assert!(bytes == a || bytes == b);
            }
        }
        assert_eq!(framer.len(), 0);
        assert!(framer.take_fds(1).is_err(), "no descriptor left over");
    }

    #[test]
    fn an_oversized_message_is_passed_over_as_it_arrives_and_the_next_one_still_comes() {
        let max = 64 * 1024;
        let big = message("Big", 4 << 20);
        let next = message("Next", 10);
        let stream = [big.clone(), next.clone()].concat();
        let mut framer = Framer::new(max);
        let mut seen = Vec::new();
        for (i, piece) in stream.chunks(64 * 1024).enumerate() {
            // The big message's descriptors come with its start; the next one's with
            // the read that starts it (the last one here).
            let fds = if i == 0 || i == stream.len() / (64 * 1024) {
                vec![fd(), fd()]
            } else {
                vec![fd()]
            };
            framer.push(piece, fds);
            seen.extend(frames(&mut framer));
            assert!(
                framer.capacity().0 <= 2 * max,
                "buffer grew to {}",
                framer.capacity().0
            );
        }
        let [Frame::Oversized { len, header }, Frame::Message(last)] = &seen[..] else {
            panic!("{seen:?}")
        };
        assert_eq!(*len, big.len());
        assert_eq!(
            header.as_ref().and_then(|h| h.member.as_deref()),
            Some("Big")
        );
        assert_eq!(*last, next);
        assert!(
            framer.capacity().1 <= 2 * max,
            "peak {:?}",
            framer.capacity()
        );
        // Only the last read's descriptors are left, for the message it started.
        assert_eq!(framer.take_fds(2).unwrap().len(), 2);
        assert!(framer.take_fds(1).is_err());
    }

    #[test]
    fn a_length_no_bus_sends_is_an_error() {
        let mut bytes = message("A", 1);
        bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut framer = Framer::new(1 << 20);
        framer.push(&bytes, vec![]);
        assert!(framer.next_frame().is_err());
    }
}
