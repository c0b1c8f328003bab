//! Whether the API server answers, as every request of one [`super::ApiClient`] and its
//! clones sees it, and the "reachable again" signal the back-off loops wait on
//! (edge autonomy, `docs/autonomy.md`, "Catching up").
//!
//! The client records the outcome of every attempt: a transport failure, a 5xx or
//! a 429 is a failure (the server cannot serve us); any other answer, 4xx
//! included, proves the way to it works. The first answer after failures ends an
//! outage: the epoch goes up by one and every subscriber gets one wake-up, so
//! the threads sleeping in a back-off (reflectors, the status and events threads,
//! node status, lease) try again at once instead of when their grown back-off
//! ends. One answer is enough: a thread retrying every few seconds (the lease)
//! notices the return for all of them.
//!
//! [`step`] is the pure transition; [`Reachability`] is the shared shell: one small
//! mutex, held to update the state and to hand out wake-ups (`try_send` on
//! one-slot channels, never blocking). Any thread may call it.

use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender, TrySendError};

/// What one request attempt showed about the way to the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered (any status but 5xx and 429).
    Answered,
    /// No answer (transport failure), or one saying the server cannot serve us now
    /// (5xx, 429).
    Failed,
}

/// The state between outcomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The last outcome was a failure.
    pub cut_off: bool,
    /// How many outages have ended so far.
    pub epoch: u64,
}

/// The state after `outcome`, and whether it ended an outage (pure).
pub fn step(state: State, outcome: Outcome) -> (State, bool) {
    match (state.cut_off, outcome) {
        (true, Outcome::Answered) => (
            State {
                cut_off: false,
                epoch: state.epoch + 1,
            },
            true,
        ),
        (_, Outcome::Answered) => (state, false),
        (_, Outcome::Failed) => (
            State {
                cut_off: true,
                ..state
            },
            false,
        ),
    }
}

struct Inner {
    state: State,
    /// One-slot wake-up channels; a disconnected one is dropped at the next wake-up.
    subscribers: Vec<Sender<()>>,
}

/// The shared reachability of one API server; cheap to clone, clones share it.
#[derive(Clone)]
pub struct Reachability {
    inner: Arc<Mutex<Inner>>,
}

impl Default for Reachability {
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                state: State::default(),
                subscribers: Vec::new(),
            })),
        }
    }
}

impl std::fmt::Debug for Reachability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reachability")
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Reachability {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each update is one assignment and a retain: a panic elsewhere leaves it whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one attempt's outcome; wakes every subscriber when it ends an outage.
    pub fn record(&self, outcome: Outcome) {
        let mut inner = self.lock();
        let (state, returned) = step(inner.state, outcome);
        inner.state = state;
        if returned {
            log::info!(
                "api: the API server answers again (outage {} over); catching up",
                state.epoch
            );
            // A full slot already holds a wake-up the subscriber has not taken.
            inner
                .subscribers
                .retain(|s| !matches!(s.try_send(()), Err(TrySendError::Disconnected(_))));
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.lock().state
    }

    /// True while the last attempt failed: the API server is taken as unreachable.
    pub fn is_cut_off(&self) -> bool {
        self.state().cut_off
    }

    /// A channel that receives one message each time an outage ends (at most one
    /// waits unread). Dropping the receiver unsubscribes.
    pub fn subscribe(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.lock().subscribers.push(tx);
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_answer_after_failures_ends_an_outage() {
        use Outcome::{Answered, Failed};
        let cases: &[(&str, &[Outcome], State, usize)] = &[
            ("answers only", &[Answered, Answered], State::default(), 0),
            (
                "failing",
                &[Failed, Failed],
                State {
                    cut_off: true,
                    epoch: 0,
                },
                0,
            ),
            (
                "one outage",
                &[Failed, Failed, Answered, Answered],
                State {
                    cut_off: false,
                    epoch: 1,
                },
                1,
            ),
            (
                "two outages",
                &[Failed, Answered, Failed, Failed, Answered],
                State {
                    cut_off: false,
                    epoch: 2,
                },
                2,
            ),
        ];
        for (name, outcomes, want, returns) in cases {
            let mut state = State::default();
            let mut seen = 0;
            for o in *outcomes {
                let (next, returned) = step(state, *o);
                state = next;
                seen += usize::from(returned);
            }
            assert_eq!((state, seen), (*want, *returns), "{name}");
        }
    }

    #[test]
    fn every_subscriber_is_woken_once_per_return_and_a_dropped_one_is_forgotten() {
        let r = Reachability::default();
        let a = r.subscribe();
        let b = r.subscribe();
        let gone = r.subscribe();
        drop(gone);
        r.record(Outcome::Answered);
        assert!(a.try_recv().is_err(), "no outage, no wake-up");
        r.record(Outcome::Failed);
        assert!(r.is_cut_off());
        r.record(Outcome::Answered);
        r.record(Outcome::Answered);
        assert!(a.try_recv().is_ok());
        assert!(a.try_recv().is_err(), "one wake-up per return");
        // Two returns while b did not look: one wake-up waits.
        r.record(Outcome::Failed);
        r.record(Outcome::Answered);
        assert_eq!(b.len(), 1);
        assert_eq!(r.state().epoch, 2);
        assert_eq!(r.lock().subscribers.len(), 2, "the dropped one is gone");
    }
}
