//! Request verbs and the per-verb request counters of an [`ApiClient`](super::client::ApiClient).
//!
//! Every HTTP attempt the client makes (retries included) bumps exactly one counter,
//! so `stats()` answers "how many requests did litelet send to the API server",
//! which we report per minute at idle. Counters are atomics shared by all clones of a
//! client; any thread may read them. They only grow.
//!
//! Every finished attempt of every client is also handed to the process's attempt
//! observer, when one is installed ([`observe_attempts`]): the metrics registry's
//! `rest_client_*` series, as client-go reports them (this layer knows no metrics).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// One finished HTTP attempt to the API server.
#[derive(Clone, Copy, Debug)]
pub struct Attempt<'a> {
    /// `GET`, `POST`, ...
    pub method: &'static str,
    /// The server's `host:port`.
    pub host: &'a str,
    /// The status code; None when no answer came (a transport error).
    pub code: Option<u16>,
    /// Until the answer's head (a watch's body streams on).
    pub took: Duration,
}

static OBSERVER: OnceLock<fn(&Attempt<'_>)> = OnceLock::new();

/// Installs the process's attempt observer (the first call wins).
pub fn observe_attempts(observer: fn(&Attempt<'_>)) {
    let _ = OBSERVER.set(observer);
}

pub(crate) fn observed(attempt: &Attempt<'_>) {
    if let Some(observer) = OBSERVER.get() {
        observer(attempt);
    }
}

/// The Kubernetes verb of a request, as the API server's audit log and metrics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Verb {
    pub const ALL: [Verb; 7] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
    ];

    /// The lowercase verb name (`get`, `list`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    /// The HTTP method carrying this verb.
    pub fn method(self) -> &'static str {
        match self {
            Verb::Get | Verb::List | Verb::Watch => "GET",
            Verb::Create => "POST",
            Verb::Update => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }

    /// True when sending the request twice has the same effect as sending it once,
    /// so a retry after an unclear failure is safe. Only POST is not.
    pub fn is_idempotent(self) -> bool {
        self != Verb::Create
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Shared counters; lives behind an `Arc` in the client.
#[derive(Debug, Default)]
pub(crate) struct RequestCounters {
    by_verb: [AtomicU64; 7],
    retries: AtomicU64,
}

impl RequestCounters {
    /// Counts one HTTP attempt of `verb`.
    pub(crate) fn record(&self, verb: Verb) {
        self.by_verb[verb.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one attempt that was a retry of an earlier failed one.
    pub(crate) fn record_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RequestStats {
        let mut by_verb = [0; 7];
        for (slot, counter) in by_verb.iter_mut().zip(&self.by_verb) {
            *slot = counter.load(Ordering::Relaxed);
        }
        RequestStats {
            by_verb,
            retries: self.retries.load(Ordering::Relaxed),
        }
    }
}

/// A point-in-time copy of the request counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    by_verb: [u64; 7],
    /// Attempts that repeated a failed one (already included in the verb counts).
    pub retries: u64,
}

impl RequestStats {
    /// HTTP attempts made with `verb`.
    pub fn count(&self, verb: Verb) -> u64 {
        self.by_verb[verb.index()]
    }

    /// All HTTP attempts.
    pub fn total(&self) -> u64 {
        self.by_verb.iter().sum()
    }

    /// Per-verb growth since `earlier` (for rates over a window).
    pub fn since(&self, earlier: &RequestStats) -> RequestStats {
        let mut by_verb = [0; 7];
        for (i, slot) in by_verb.iter_mut().enumerate() {
            *slot = self.by_verb[i].saturating_sub(earlier.by_verb[i]);
        }
        RequestStats {
            by_verb,
            retries: self.retries.saturating_sub(earlier.retries),
        }
    }
}

impl fmt::Display for RequestStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for verb in Verb::ALL {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{verb}={}", self.count(verb))?;
        }
        write!(f, " retries={}", self.retries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_snapshot_and_since() {
        let c = RequestCounters::default();
        c.record(Verb::Get);
        let before = c.snapshot();
        c.record(Verb::Get);
        c.record(Verb::Patch);
        c.record_retry();
        let after = c.snapshot();
        assert_eq!(after.count(Verb::Get), 2);
        assert_eq!(after.total(), 3);
        let d = after.since(&before);
        assert_eq!(d.count(Verb::Get), 1);
        assert_eq!(d.count(Verb::Patch), 1);
        assert_eq!(d.retries, 1);
        assert_eq!(
            d.to_string(),
            "get=1 list=0 watch=0 create=0 update=0 patch=1 delete=0 retries=1"
        );
    }

    #[test]
    fn verbs() {
        assert_eq!(Verb::Watch.method(), "GET");
        assert!(!Verb::Create.is_idempotent());
        assert!(Verb::Patch.is_idempotent());
    }
}
