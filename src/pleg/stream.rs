//! Where the runtime's container event stream stands, as the `pleg` thread tracks it
//! (pure: the thread feeds it what happened and the time, and reads back when to
//! relist and when to reopen the stream).
//!
//! Upstream's Evented PLEG: while events flow, relisting slows to
//! [`EVENTED_RELIST_PERIOD`] (a safety net for lost events); when the stream fails,
//! relisting goes back to the normal period at once and the stream is reopened, at
//! most [`MAX_STREAM_RETRIES`] times in a row (upstream's eventedPlegMaxStreamRetries);
//! then the PLEG relists at the normal period for good. A runtime that has no stream
//! (UNIMPLEMENTED, as containerd 1.6) is relisted for good at once, without retries.
//! Unlike upstream, which reopens at once and never forgets a failure, litelet waits
//! a doubling [`backoff`] between attempts, and a stream that went live starts the
//! count over: a runtime restart now and then does not use up the retries.
//!
//! An event stream gives no sign that it is established (a gRPC server sends its
//! headers with the first event), so a new stream counts as live only once it stayed
//! open for [`PROBATION`] and a relist started after that: anything that happened
//! before the runtime began sending events is in that relist. That catch-up relist is
//! due at the end of the probation, whatever the relist period.

use std::time::{Duration, Instant};

use crate::cri::CriError;

/// How often the runtime is relisted while events flow (upstream: 300 s).
pub const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(300);
/// A stream open this long without failing counts as established.
pub const PROBATION: Duration = Duration::from_secs(2);
/// Failed attempts in a row before the PLEG gives up on events (upstream: 5).
pub const MAX_STREAM_RETRIES: u32 = 5;
/// The wait before reopening a stream after its first failure; it doubles with each
/// failure in a row.
pub const FIRST_RETRY_WAIT: Duration = Duration::from_secs(1);

/// The event stream's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventStream {
    /// Opened at `since`, after `failures` failed attempts in a row; relisting stays
    /// at the normal period until the stream is live.
    Opening { since: Instant, failures: u32 },
    /// Established: events keep the PLEG's view current; relisting is a safety net.
    Live,
    /// Failed `failures` times in a row; reopened at `retry_at`.
    Down { failures: u32, retry_at: Instant },
    /// No events: the feature gate is off, the runtime has no stream, or the retries
    /// ran out. Relisting at the normal period, for good.
    Off,
}

/// How the stream ended, for the shell to log and count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The runtime has no event stream: relisting only, nothing to retry.
    Unsupported,
    /// Reopened after a back-off (the `failures`th failure in a row).
    Retrying { failures: u32 },
    /// [`MAX_STREAM_RETRIES`] failures in a row: relisting only from now on.
    GaveUp,
}

/// How long to wait before the next attempt after `failures` failures in a row,
/// `first` after the first: with [`FIRST_RETRY_WAIT`], 1 s, 2 s, 4 s, 8 s.
pub fn backoff(failures: u32, first: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(MAX_STREAM_RETRIES);
    first * (1u32 << doublings)
}

impl EventStream {
    /// A stream just opened at `now`.
    pub fn opened(now: Instant) -> EventStream {
        EventStream::Opening {
            since: now,
            failures: 0,
        }
    }

    /// True while events keep the view current.
    pub fn is_live(&self) -> bool {
        matches!(self, EventStream::Live)
    }

    /// When the next relist is due, the last one having started at `last`: after
    /// `normal`, or [`EVENTED_RELIST_PERIOD`] while live; an opening stream has its
    /// catch-up relist at the end of its probation if that comes first.
    pub fn next_relist(&self, last: Instant, normal: Duration) -> Instant {
        match self {
            EventStream::Live => last + EVENTED_RELIST_PERIOD.max(normal),
            EventStream::Opening { since, .. } => (*since + PROBATION).min(last + normal),
            EventStream::Down { .. } | EventStream::Off => last + normal,
        }
    }

    /// When to reopen the stream, if it is down.
    pub fn retry_at(&self) -> Option<Instant> {
        match self {
            EventStream::Down { retry_at, .. } => Some(*retry_at),
            _ => None,
        }
    }

    /// After a relist that started at `relisted`: an opening stream that has stayed
    /// open for the probation before that relist is live now.
    pub fn after_relist(self, relisted: Instant) -> EventStream {
        match self {
            EventStream::Opening { since, .. } if relisted >= since + PROBATION => {
                EventStream::Live
            }
            other => other,
        }
    }

    /// The stream ended at `now` with `outcome` (a clean end counts as a failure too:
    /// the runtime stopped sending); a retry waits [`backoff`] from `first_wait`.
    /// Returns the next state and what it means.
    pub fn ended(
        self,
        outcome: &Result<(), CriError>,
        now: Instant,
        first_wait: Duration,
    ) -> (EventStream, Ending) {
        if matches!(outcome, Err(err) if err.is_unimplemented()) {
            return (EventStream::Off, Ending::Unsupported);
        }
        let failures = match self {
            EventStream::Opening { failures, .. } | EventStream::Down { failures, .. } => {
                failures + 1
            }
            EventStream::Live => 1,
            EventStream::Off => return (EventStream::Off, Ending::GaveUp),
        };
        if failures >= MAX_STREAM_RETRIES {
            return (EventStream::Off, Ending::GaveUp);
        }
        let down = EventStream::Down {
            failures,
            retry_at: now + backoff(failures, first_wait),
        };
        (down, Ending::Retrying { failures })
    }

    /// Reopened at `now` after being down.
    pub fn reopened(self, now: Instant) -> EventStream {
        match self {
            EventStream::Down { failures, .. } => EventStream::Opening {
                since: now,
                failures,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NORMAL: Duration = Duration::from_secs(1);
    const W: Duration = FIRST_RETRY_WAIT;

    fn unimplemented() -> CriError {
        CriError::Other {
            op: "get_container_events",
            code: 12,
            message: "unknown method GetContainerEvents".into(),
        }
    }

    fn unavailable() -> CriError {
        CriError::Unavailable {
            op: "get_container_events",
            message: "socket closed".into(),
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_stream_goes_live_only_after_a_relist_past_its_probation() {
        let t0 = Instant::now();
        let s = EventStream::opened(t0).after_relist(t0 + secs(1));
        assert!(!s.is_live(), "a relist inside the probation proves nothing");
        let s = s.after_relist(t0 + PROBATION);
        assert!(s.is_live());
        assert_eq!(s.next_relist(t0, NORMAL), t0 + EVENTED_RELIST_PERIOD);
    }

    #[test]
    fn a_failed_stream_is_retried_with_a_doubling_backoff_then_given_up() {
        let t0 = Instant::now();
        let mut s = EventStream::opened(t0).after_relist(t0 + PROBATION);
        assert!(s.is_live());
        let mut now = t0 + secs(100);
        let mut waits = Vec::new();
        let mut endings = Vec::new();
        loop {
            let (next, ending) = s.ended(&Err(unavailable()), now, W);
            endings.push(ending);
            let Some(retry) = next.retry_at() else {
                s = next;
                break;
            };
            waits.push(retry.duration_since(now).as_secs());
            assert_eq!(
                next.next_relist(now, NORMAL),
                now + NORMAL,
                "down: normal period"
            );
            now = retry;
            s = next.reopened(now);
        }
        assert_eq!(waits, [1, 2, 4, 8]);
        assert_eq!(endings.len() as u32, MAX_STREAM_RETRIES);
        assert_eq!(endings.last(), Some(&Ending::GaveUp));
        assert_eq!(s, EventStream::Off);
        assert_eq!(s.next_relist(now, NORMAL), now + NORMAL);
        assert_eq!(s.retry_at(), None);
    }

    #[test]
    fn a_stream_that_went_live_starts_the_failure_count_over() {
        let t0 = Instant::now();
        let (down, _) = EventStream::opened(t0).ended(&Ok(()), t0, W);
        let (down, ending) = down.reopened(t0 + secs(1)).ended(&Ok(()), t0 + secs(1), W);
        assert_eq!(ending, Ending::Retrying { failures: 2 });
        let live = down
            .reopened(t0 + secs(3))
            .after_relist(t0 + secs(3) + PROBATION);
        assert!(live.is_live());
        let (down, ending) = live.ended(&Err(unavailable()), t0 + secs(100), W);
        assert_eq!(ending, Ending::Retrying { failures: 1 });
        assert_eq!(down.retry_at(), Some(t0 + secs(101)));
    }

    #[test]
    fn unimplemented_turns_events_off_without_a_retry() {
        let t0 = Instant::now();
        for state in [
            EventStream::opened(t0),
            EventStream::Live,
            EventStream::Down {
                failures: 2,
                retry_at: t0,
            },
        ] {
            let (next, ending) = state.ended(&Err(unimplemented()), t0, W);
            assert_eq!((next, ending), (EventStream::Off, Ending::Unsupported));
        }
    }

    #[test]
    fn relists_are_due_by_state() {
        let t0 = Instant::now();
        let last = t0 + secs(10);
        let cases = [
            (
                "live: the safety net",
                EventStream::Live,
                last + EVENTED_RELIST_PERIOD,
            ),
            ("off: the normal period", EventStream::Off, last + NORMAL),
            (
                "down: the normal period",
                EventStream::Down {
                    failures: 1,
                    retry_at: t0,
                },
                last + NORMAL,
            ),
            (
                "opening: the catch-up relist ends the probation",
                EventStream::opened(last),
                last + NORMAL,
            ),
        ];
        for (name, state, want) in cases {
            assert_eq!(state.next_relist(last, NORMAL), want, "{name}");
        }
        // With a long normal period, the catch-up relist still comes after the probation.
        let long = secs(3600);
        assert_eq!(
            EventStream::opened(last).next_relist(last, long),
            last + PROBATION
        );
        assert_eq!(EventStream::Live.next_relist(last, long), last + long);
    }
}
