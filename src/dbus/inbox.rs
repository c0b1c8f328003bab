//! What a connection keeps for its reader and what it counts: delivered messages
//! waiting for `next_message`, bounded in number and in accounted bytes (the oldest
//! go first when a new one does not fit), the counts of what was dropped, and the
//! log lines saying so, at most one every [`LOG_EVERY`] (a local user can send
//! thousands of forged signals a second; the journal must not pay for each).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::message::{Message, MessageKind};
use super::subscription::Dropped;
use super::BUS_NAME;

/// Least time between two log lines about dropped messages.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// What a connection holds and has dropped, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Messages waiting for `next_message`.
    pub queued: usize,
    /// Their accounted bytes.
    pub queued_bytes: usize,
    /// The most accounted bytes ever waiting at once.
    pub peak_queued_bytes: usize,
    /// Capacity of the read buffer now, and the most it ever had.
    pub read_buffer: usize,
    pub peak_read_buffer: usize,
    /// Messages dropped unread: not subscribed, not from the owner, calls not served.
    pub unwanted: u64,
    /// Messages passed over for their size, or dropped when their body would decode
    /// past the budget or not at all.
    pub oversized: u64,
    pub undecodable: u64,
    /// Messages dropped from a full queue.
    pub overflowed: u64,
}

/// The queue and the counters of one connection.
#[derive(Debug)]
pub struct Inbox {
    queue: VecDeque<(Message, usize)>,
    max_messages: usize,
    max_bytes: usize,
    stats: ConnectionStats,
    log: DropLog,
}

impl Inbox {
    /// A queue of at most `max_messages` messages and `max_bytes` accounted bytes.
    pub fn new(max_messages: usize, max_bytes: usize) -> Inbox {
        Inbox {
            queue: VecDeque::new(),
            max_messages,
            max_bytes,
            stats: ConnectionStats::default(),
            log: DropLog::default(),
        }
    }

    /// Keeps a decoded message accounted at `cost` bytes, dropping the oldest ones
    /// while it does not fit (and itself when it alone is over the bound).
    pub fn push(&mut self, msg: Message, cost: usize) {
        if cost > self.max_bytes {
            self.stats.overflowed += 1;
            self.note(format!(
                "dropped {} of {cost} accounted bytes: more than the queue holds",
                describe(&msg)
            ));
            return;
        }
        let mut dropped = 0;
        while self.stats.queued >= self.max_messages
            || self.stats.queued_bytes + cost > self.max_bytes
        {
            let Some((_, old)) = self.queue.pop_front() else {
                break;
            };
            self.stats.queued -= 1;
            self.stats.queued_bytes -= old;
            dropped += 1;
        }
        if dropped > 0 {
            self.stats.overflowed += dropped;
            self.note(format!(
                "{dropped} unread messages dropped: the queue holds {} messages and {} \
                 bytes at most",
                self.max_messages, self.max_bytes
            ));
        }
        self.queue.push_back((msg, cost));
        self.stats.queued += 1;
        self.stats.queued_bytes += cost;
        self.stats.peak_queued_bytes = self.stats.peak_queued_bytes.max(self.stats.queued_bytes);
    }

    /// The oldest message kept.
    pub fn pop(&mut self) -> Option<Message> {
        let (msg, cost) = self.queue.pop_front()?;
        self.stats.queued -= 1;
        self.stats.queued_bytes -= cost;
        Some(msg)
    }

    /// Counts (and logs, unless the bus itself sent it) a message dropped unread.
    pub fn unwanted(&mut self, msg: &Message, why: &Dropped) {
        self.stats.unwanted += 1;
        if msg.sender.as_deref() != Some(BUS_NAME) {
            self.note(format!("ignored {}: {why}", describe(msg)));
        }
    }

    /// Counts and logs a message passed over for its length.
    pub fn oversized(&mut self, len: usize, limit: usize, header: Option<&Message>) {
        self.stats.oversized += 1;
        let what = header.map_or_else(|| "a message".to_owned(), describe);
        self.note(format!(
            "passed over {what} of {len} bytes (at most {limit} are read)"
        ));
    }

    /// Counts and logs a message whose body did not decode (too large, or malformed).
    pub fn undecodable(&mut self, msg: &Message, error: &super::DbusError) {
        if matches!(error, super::DbusError::TooLarge { .. }) {
            self.stats.oversized += 1;
        } else {
            self.stats.undecodable += 1;
        }
        self.note(format!("dropped {}: {error}", describe(msg)));
    }

    /// The counters, with the read buffer's capacity given by the caller.
    pub fn stats(&self, read_buffer: (usize, usize)) -> ConnectionStats {
        ConnectionStats {
            read_buffer: read_buffer.0,
            peak_read_buffer: read_buffer.1,
            ..self.stats
        }
    }

    fn note(&mut self, line: String) {
        if let Some(held) = self.log.admit(Instant::now()) {
            if held > 0 {
                log::warn!("dbus: {line} ({held} more dropped since the last report)");
            } else {
                log::warn!("dbus: {line}");
            }
        }
    }
}

/// A short description of a message for a log line: kind, member, path, sender.
fn describe(msg: &Message) -> String {
    let kind = match msg.kind {
        MessageKind::Signal => "signal",
        MessageKind::MethodCall => "method call",
        MessageKind::MethodReturn => "method return",
        MessageKind::Error => "error",
    };
    format!(
        "{kind} {}.{} on {} from {}",
        msg.interface.as_deref().unwrap_or("-"),
        msg.member.as_deref().unwrap_or("-"),
        msg.path.as_deref().unwrap_or("-"),
        msg.sender.as_deref().unwrap_or("-"),
    )
}

/// At most one line per [`LOG_EVERY`]; the lines held back are counted.
#[derive(Debug, Default)]
pub struct DropLog {
    last: Option<Instant>,
    held: u64,
}

impl DropLog {
    /// Whether a line may be written at `now`: the number of lines held back since
    /// the last one, or None (this one is held back too).
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < LOG_EVERY => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: u32) -> Message {
        Message::signal("/p", "org.example.I", "S").arg(crate::dbus::Value::U32(n))
    }

    fn numbers(inbox: &mut Inbox) -> Vec<u32> {
        std::iter::from_fn(|| inbox.pop())
            .map(|m| m.body[0].as_u64().unwrap() as u32)
            .collect()
    }

    #[test]
    fn the_queue_is_bounded_in_bytes_dropping_the_oldest() {
        let mut inbox = Inbox::new(100, 1000);
        for n in 0..5 {
            inbox.push(msg(n), 300);
        }
        let stats = inbox.stats((0, 0));
        assert_eq!((stats.queued, stats.queued_bytes), (3, 900));
        assert_eq!(stats.overflowed, 2);
        assert!(stats.peak_queued_bytes <= 1000);
        // One alone over the bound is dropped, and the others stay.
        inbox.push(msg(99), 1001);
        assert_eq!(inbox.stats((0, 0)).overflowed, 3);
        assert_eq!(numbers(&mut inbox), [2, 3, 4]);
        assert_eq!(inbox.stats((0, 0)).queued_bytes, 0);
    }

    #[test]
    fn the_queue_is_bounded_in_count() {
        let mut inbox = Inbox::new(2, 1 << 20);
        for n in 0..4 {
            inbox.push(msg(n), 1);
        }
        assert_eq!(numbers(&mut inbox), [2, 3]);
    }

    #[test]
    fn drop_lines_are_written_once_per_interval_counting_the_rest() {
        let mut log = DropLog::default();
        let start = Instant::now();
        assert_eq!(log.admit(start), Some(0));
        assert_eq!(log.admit(start + Duration::from_secs(1)), None);
        assert_eq!(log.admit(start + Duration::from_secs(9)), None);
        assert_eq!(log.admit(start + LOG_EVERY), Some(2));
        assert_eq!(log.admit(start + LOG_EVERY * 3), Some(0));
    }
}
