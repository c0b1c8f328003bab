//! The attempt threads (`probe-0`, `probe-1`, ...): each takes one resolved attempt at
//! a time from a shared queue, runs it (bounded by its timeout) and reports back.
//!
//! Owned and sized by the `probe-timer` thread, which is the only one to touch
//! [`Pool`]: it counts attempts in flight exactly (submitted minus finished). The first
//! thread starts with the first attempt; another starts only when attempts have been
//! waiting for a free thread for `grow_after` (so a burst of quick probes is absorbed
//! by few threads, while a hung probe costs the others at most that delay), one per
//! `grow_after`, up to `max_threads`. Every `idle_timeout` the threads beyond the peak
//! concurrency of the last window are retired by queueing `Exit` messages. Channels: `Msg` timer → threads (unbounded; at most one attempt per probe
//! is ever queued), [`Done`] threads → timer. A panicking attempt is caught and
//! reported as Unknown, so the counts stay exact.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::action::{Action, Prober};
use super::{Attempt, ProberConfig};

/// One attempt to run.
pub struct Job {
    pub worker: u64,
    pub action: Action,
    pub timeout: Duration,
    pub started: Instant,
}

/// One attempt's outcome.
pub struct Done {
    pub worker: u64,
    pub attempt: Attempt,
    pub started: Instant,
}

enum Msg {
    Run(Job),
    /// The thread that takes this ends.
    Exit,
}

pub struct Pool {
    prober: Arc<Prober>,
    config: ProberConfig,
    jobs_tx: Sender<Msg>,
    jobs_rx: Receiver<Msg>,
    done: Sender<Done>,
    alive: usize,
    in_flight: usize,
    /// Highest `in_flight` since the last trim.
    peak: usize,
    spawned: usize,
    last_trim: Instant,
    /// Since when attempts have been waiting with every thread busy.
    backlog_since: Option<Instant>,
}

impl Pool {
    pub fn new(
        prober: Arc<Prober>,
        config: ProberConfig,
        done: Sender<Done>,
        now: Instant,
    ) -> Pool {
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        Pool {
            prober,
            config,
            jobs_tx,
            jobs_rx,
            done,
            alive: 0,
            in_flight: 0,
            peak: 0,
            spawned: 0,
            last_trim: now,
            backlog_since: None,
        }
    }

    /// Live attempt threads.
    pub fn alive(&self) -> usize {
        self.alive
    }

    /// Attempts queued or running.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues `job`; starts the first thread. Gives the job back when no thread exists
    /// and none can be started.
    pub fn submit(&mut self, job: Job, now: Instant) -> Result<(), Job> {
        if self.alive == 0 {
            if let Err(err) = self.spawn() {
                log::warn!("prober: cannot start an attempt thread: {err}");
                return Err(job);
            }
        }
        self.in_flight += 1;
        self.peak = self.peak.max(self.in_flight);
        if self.in_flight > self.alive && self.backlog_since.is_none() {
            self.backlog_since = Some(now);
        }
        match self.jobs_tx.send(Msg::Run(job)) {
            Ok(()) => Ok(()),
            // Cannot happen while the pool holds a receiver; keep the count right anyway.
            Err(crossbeam_channel::SendError(msg)) => {
                self.in_flight -= 1;
                match msg {
                    Msg::Run(job) => Err(job),
                    Msg::Exit => Ok(()),
                }
            }
        }
    }

    /// An attempt reported back.
    pub fn finished(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight <= self.alive {
            self.backlog_since = None;
        }
    }

    /// Adds a thread when attempts have waited `grow_after` for one; returns when to
    /// look again (None: no backlog).
    pub fn grow(&mut self, now: Instant) -> Option<Instant> {
        let since = self.backlog_since?;
        if self.in_flight <= self.alive || self.alive >= self.config.max_threads.max(1) {
            self.backlog_since = None;
            return None;
        }
        let at = since + self.config.grow_after;
        if now < at {
            return Some(at);
        }
        if let Err(err) = self.spawn() {
            log::warn!("prober: cannot start another attempt thread: {err}");
        }
        let next = (self.in_flight > self.alive).then_some(now);
        self.backlog_since = next;
        next.map(|n| n + self.config.grow_after)
    }

    /// Retires threads idle for a whole window: keeps the window's peak, and one.
    pub fn trim(&mut self, now: Instant) {
        if now.duration_since(self.last_trim) < self.config.idle_timeout {
            return;
        }
        let keep = self.peak.max(self.in_flight).max(1);
        while self.alive > keep {
            if self.jobs_tx.send(Msg::Exit).is_err() {
                break;
            }
            self.alive -= 1;
        }
        self.peak = self.in_flight;
        self.last_trim = now;
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let name = format!("probe-{}", self.spawned);
        let (prober, jobs, done) = (self.prober.clone(), self.jobs_rx.clone(), self.done.clone());
        std::thread::Builder::new()
            .name(name)
            .stack_size(self.config.stack_size)
            .spawn(move || attempt_loop(&prober, &jobs, &done))?;
        self.spawned += 1;
        self.alive += 1;
        Ok(())
    }
}

/// One attempt thread: runs jobs until told to exit or the queue closes.
fn attempt_loop(prober: &Prober, jobs: &Receiver<Msg>, done: &Sender<Done>) {
    while let Ok(Msg::Run(job)) = jobs.recv() {
        let attempt =
            std::panic::catch_unwind(AssertUnwindSafe(|| prober.run(&job.action, job.timeout)))
                .unwrap_or_else(|_| Attempt::Unknown("the probe attempt panicked".into()));
        let report = Done {
            worker: job.worker,
            attempt,
            started: job.started,
        };
        if done.send(report).is_err() {
            return;
        }
    }
}
