//! A few threads that make API requests for callers that must keep a small stack.
//!
//! One request (rustls reading and writing TLS records, then serde decoding the
//! answer) touches about 60 KiB of stack on the thread that makes it, and a thread
//! keeps the stack pages it once touched for as long as it lives. Pod worker threads,
//! one per pod, read configMaps, secrets and service account tokens while they set up
//! volumes. A client made with [`ApiClient::with_request_threads`] hands each request
//! to these threads and waits for the answer, so only they carry the deep stacks
//! (measured at 100 pods: about 80 KiB of stack per pod worker before, 20 KiB after).
//!
//! [`ApiClient::with_request_threads`]: super::client::ApiClient::with_request_threads

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;

use crossbeam_channel::{bounded, unbounded, Sender};

use super::error::ApiError;

/// Stack of a request thread: a request needs about 60 KiB.
const STACK: usize = 256 * 1024;

type Job = Box<dyn FnOnce() + Send>;

/// Handle to the request threads; cheap to clone. The threads end once every handle
/// (and every client holding one) is dropped.
#[derive(Clone)]
pub struct RequestThreads {
    jobs: Arc<Sender<Job>>,
}

impl std::fmt::Debug for RequestThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestThreads").finish_non_exhaustive()
    }
}

impl RequestThreads {
    /// Starts `count` threads named `<name>-<i>`.
    pub fn start(name: &str, count: usize) -> std::io::Result<RequestThreads> {
        let (jobs, queue) = unbounded::<Job>();
        for i in 0..count.max(1) {
            let queue = queue.clone();
            thread::Builder::new()
                .name(format!("{name}-{i}"))
                .stack_size(STACK)
                .spawn(move || {
                    for job in queue {
                        // A panicking request fails only its caller (its answer channel
                        // is dropped); the thread goes on serving the others.
                        let _ = catch_unwind(AssertUnwindSafe(job));
                    }
                })?;
        }
        Ok(RequestThreads {
            jobs: Arc::new(jobs),
        })
    }

    /// Runs `request` on one of the threads and waits for its answer. `path` names
    /// the request in the error if no thread could answer.
    pub fn run<T: Send + 'static>(
        &self,
        path: &str,
        request: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let (answer_tx, answer) = bounded(1);
        let job: Job = Box::new(move || {
            let _ = answer_tx.send(request());
        });
        if self.jobs.send(job).is_err() {
            return Err(no_answer(path));
        }
        answer.recv().unwrap_or_else(|_| Err(no_answer(path)))
    }
}

fn no_answer(path: &str) -> ApiError {
    ApiError::Internal {
        path: path.to_owned(),
        message: "the request thread ended without an answer".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_runs_on_a_request_thread_and_its_answer_comes_back() {
        let threads = RequestThreads::start("test-req", 2).unwrap();
        let name = threads
            .run("/x", || Ok(thread::current().name().map(str::to_owned)))
            .unwrap();
        assert!(name.is_some_and(|n| n.starts_with("test-req-")));
        let err = threads
            .run::<()>("/y", || {
                let bad = serde_json::from_str::<u8>("bad").unwrap_err();
                Err(ApiError::Decode {
                    path: "/y".into(),
                    source: crate::api::error::DecodeError::Json(std::sync::Arc::new(bad)),
                })
            })
            .unwrap_err();
        assert!(matches!(err, ApiError::Decode { .. }));
    }

    #[test]
    fn a_panicking_request_fails_its_caller_and_the_threads_keep_serving() {
        let threads = RequestThreads::start("test-req", 1).unwrap();
        let err = threads
            .run::<()>("/boom", || panic!("request bug"))
            .unwrap_err();
        assert!(matches!(err, ApiError::Internal { ref path, .. } if path == "/boom"));
        assert_eq!(threads.run("/after", || Ok(7)).unwrap(), 7);
    }
}
