//! The events thread's outage buffer (pure: "now" comes from the caller).
//!
//! When the API server cannot take an event (no answer, 5xx, 429) the event is kept,
//! and so is every later one, in order, until the server is back: nothing is sent
//! around a waiting event. The buffer is bounded: when full, the oldest waiting event
//! is dropped, since the newest say most about the node now (upstream's broadcaster
//! drops too, when its queue is full). The first event in line is retried with a
//! back-off doubling from `initial` to `max`; once the buffer is empty again the
//! outage ends with one [`OutageReport`], which the thread logs: the only place the
//! drops are told, once per outage.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What one outage cost, reported once when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutageReport {
    /// From the first failed event to the last buffered one sent.
    pub lasted: Duration,
    /// Buffered events that reached the server afterwards.
    pub sent: usize,
    /// Events the server refused once it answered again (not retried).
    pub refused: usize,
    /// Events dropped because the buffer was full.
    pub dropped: usize,
}

#[derive(Clone, Copy, Debug)]
struct Outage {
    started: Instant,
    delay: Duration,
    next_try: Instant,
    sent: usize,
    refused: usize,
    dropped: usize,
}

/// Events waiting for the API server, with the outage's retry clock.
#[derive(Debug)]
pub struct OutageBuffer<T> {
    capacity: usize,
    initial: Duration,
    max: Duration,
    queue: VecDeque<T>,
    outage: Option<Outage>,
}

impl<T> OutageBuffer<T> {
    /// Holds at most `capacity` events (at least one); retries after `initial`,
    /// doubling up to `max`.
    pub fn new(capacity: usize, initial: Duration, max: Duration) -> Self {
        Self {
            capacity: capacity.max(1),
            initial,
            max: max.max(initial),
            queue: VecDeque::new(),
            outage: None,
        }
    }

    /// True while events wait for the server: new ones must queue behind them.
    pub fn in_outage(&self) -> bool {
        self.outage.is_some()
    }

    /// Most events kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Events dropped so far in the current outage.
    pub fn dropped(&self) -> usize {
        self.outage.map_or(0, |o| o.dropped)
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Sending `item` failed because the server is unreachable or overloaded: it goes
    /// back first in line and the next try waits longer. True when this starts an
    /// outage.
    pub fn failed(&mut self, item: T, now: Instant) -> bool {
        let started = self.outage.is_none();
        let outage = self.outage.get_or_insert(Outage {
            started: now,
            delay: Duration::ZERO,
            next_try: now,
            sent: 0,
            refused: 0,
            dropped: 0,
        });
        outage.delay = if started {
            self.initial
        } else {
            self.max
                .min(outage.delay.saturating_mul(2).max(self.initial))
        };
        outage.next_try = now + outage.delay;
        self.queue.push_front(item);
        self.trim();
        started
    }

    /// An event recorded during the outage waits behind the others.
    pub fn push(&mut self, item: T) {
        self.queue.push_back(item);
        self.trim();
    }

    /// When the first event in line may be tried again; None outside an outage.
    pub fn next_try(&self) -> Option<Instant> {
        self.outage
            .filter(|_| !self.queue.is_empty())
            .map(|o| o.next_try)
    }

    /// The first event in line, when its try is due. The caller sends it and then
    /// calls [`sent`](Self::sent), [`refused`](Self::refused) or
    /// [`failed`](Self::failed).
    pub fn due(&mut self, now: Instant) -> Option<T> {
        match self.next_try() {
            Some(at) if at <= now => self.queue.pop_front(),
            _ => None,
        }
    }

    /// The API server answers again (another request got through): the first event
    /// in line is due now, and the back-off starts over.
    pub fn retry_now(&mut self, now: Instant) {
        if let Some(o) = &mut self.outage {
            o.delay = Duration::ZERO;
            o.next_try = now;
        }
    }

    /// The event taken by [`due`](Self::due) reached the server: the next one may go
    /// at once. Returns the report when that was the last one (the outage is over).
    pub fn sent(&mut self, now: Instant) -> Option<OutageReport> {
        if let Some(o) = &mut self.outage {
            o.sent += 1;
            o.delay = Duration::ZERO;
            o.next_try = now;
        }
        self.end_if_empty(now)
    }

    /// The server answered but refused the event for good (e.g. 422): it is not
    /// retried. Returns the report when that was the last one.
    pub fn refused(&mut self, now: Instant) -> Option<OutageReport> {
        if let Some(o) = &mut self.outage {
            o.refused += 1;
            o.next_try = now;
        }
        self.end_if_empty(now)
    }

    fn end_if_empty(&mut self, now: Instant) -> Option<OutageReport> {
        if !self.queue.is_empty() {
            return None;
        }
        self.outage.take().map(|o| OutageReport {
            lasted: now.saturating_duration_since(o.started),
            sent: o.sent,
            refused: o.refused,
            dropped: o.dropped,
        })
    }

    fn trim(&mut self) {
        while self.queue.len() > self.capacity {
            self.queue.pop_front();
            if let Some(o) = &mut self.outage {
                o.dropped += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn buffer() -> OutageBuffer<u32> {
        OutageBuffer::new(3, 100 * MS, 400 * MS)
    }

    #[test]
    fn an_outage_keeps_order_drops_the_oldest_and_reports_once() {
        let t0 = Instant::now();
        let mut b = buffer();
        assert!(!b.in_outage());
        assert!(b.failed(1, t0), "the first failure starts the outage");
        for n in 2..=5 {
            b.push(n);
        }
        // Capacity 3: 1 and 2 were dropped.
        assert_eq!(b.len(), 3);
        assert_eq!(b.due(t0 + 99 * MS), None, "not before the back-off");
        let first = b.due(t0 + 100 * MS);
        assert_eq!(first, Some(3));
        assert_eq!(b.sent(t0 + 110 * MS), None);
        assert_eq!(b.due(t0 + 110 * MS), Some(4), "the next goes at once");
        assert_eq!(b.refused(t0 + 120 * MS), None);
        assert_eq!(b.due(t0 + 120 * MS), Some(5));
        let report = b.sent(t0 + 130 * MS);
        assert_eq!(
            report,
            Some(OutageReport {
                lasted: 130 * MS,
                sent: 2,
                refused: 1,
                dropped: 2,
            })
        );
        assert!(!b.in_outage());
        assert_eq!(b.sent(t0 + 140 * MS), None, "reported once");
    }

    #[test]
    fn retries_back_off_doubling_to_the_cap() {
        let mut now = Instant::now();
        let mut b = buffer();
        b.failed(7, now);
        let mut waits = Vec::new();
        for _ in 0..5 {
            let at = b.next_try().expect("in outage");
            waits.push(at - now);
            now = at;
            let item = b.due(now).expect("due");
            assert!(!b.failed(item, now), "same outage");
        }
        assert_eq!(waits, [100 * MS, 200 * MS, 400 * MS, 400 * MS, 400 * MS]);
        // Success resets the clock; the outage ends with the last event.
        let item = b.due(b.next_try().expect("due")).expect("item");
        assert_eq!(item, 7);
        let report = b.sent(now + 400 * MS).expect("report");
        assert_eq!((report.sent, report.dropped), (1, 0));
    }

    #[test]
    fn the_servers_return_makes_the_first_event_due_and_starts_the_back_off_over() {
        let t0 = Instant::now();
        let mut b = OutageBuffer::new(10, 2000 * MS, 60_000 * MS);
        b.retry_now(t0);
        assert_eq!(b.next_try(), None, "nothing waits outside an outage");
        b.failed(1, t0);
        b.failed(1, t0);
        b.failed(1, t0);
        assert_eq!(b.next_try(), Some(t0 + 8000 * MS));
        let later = t0 + 100 * MS;
        b.retry_now(later);
        assert_eq!(b.due(later), Some(1));
        b.failed(1, later);
        assert_eq!(
            b.next_try(),
            Some(later + 2000 * MS),
            "the back-off starts over"
        );
    }
}
