//! The `gc` thread: container, sandbox and log garbage collection every minute, image
//! garbage collection every five minutes (upstream StartGarbageCollection), a prompt
//! clean-up of dead containers when the sync loop reports a container death,
//! housekeeping's slow steps (`cleaner.rs`), the QoS cgroups' CPU shares every
//! minute (upstream's QoS manager period) once every source has reported, and the
//! `kubepods` node allocatable limits every minute until the kernel takes them
//! (`node_allocatable.rs`).
//!
//! The sync loop only sends a [`GcRequest`] (`try_send`, never blocks); this thread
//! does the CRI, API and file system work.
//! A pod's containers are removed entirely only once its workers say its content may
//! go (deleted or evicted and terminated), and only after every source has reported.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, tick, Receiver};

use super::cleaner::Cleaner;
use super::housekeeping_plan::CleanupWork;
use super::node_allocatable::NodeAllocatable;
use crate::events::{EventType, Recorder};
use crate::images::gc::{ImageGc, ImageGcPolicy};
use crate::pod_workers::PodWorkers;
use crate::runtime::gc::GcPolicy;
use crate::runtime::manager::RuntimeManager;

pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);
/// Container deaths within this window share one clean-up run.
const DEATH_DEBOUNCE: Duration = Duration::from_secs(5);

/// What the sync loop asks of the `gc` thread.
#[derive(Debug)]
pub enum GcRequest {
    /// A container of the pod with this UID died: collect dead containers soon.
    ContainerDied(String),
    /// Pod workers were forgotten: their pods' dead containers and sandboxes may go.
    PodsFinished,
    /// Housekeeping's slow steps, planned on the sync loop.
    Cleanup(CleanupWork),
}

/// Everything the `gc` thread needs.
pub struct GcLoop {
    /// Carries out housekeeping's cleanup plans.
    pub cleaner: Cleaner,
    pub manager: Arc<RuntimeManager>,
    pub workers: PodWorkers,
    pub sources_ready: Arc<AtomicBool>,
    pub policy: GcPolicy,
    pub image_policy: ImageGcPolicy,
    pub recorder: Recorder,
    pub node_name: String,
    /// The `kubepods` limits, retried while the kernel refuses them.
    pub allocatable: Option<Arc<NodeAllocatable>>,
}

impl GcLoop {
    /// Starts the thread; `requests` carries the sync loop's [`GcRequest`]s.
    pub fn spawn(
        self,
        deaths: Receiver<GcRequest>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<JoinHandle<()>> {
        crate::process::spawn_essential("gc", 512 * 1024, move || self.run(deaths, shutdown))
    }

    fn run(self, deaths: Receiver<GcRequest>, shutdown: Receiver<()>) {
        let containers = tick(CONTAINER_GC_PERIOD);
        let images = tick(IMAGE_GC_PERIOD);
        let mut image_gc = match ImageGc::new(self.image_policy.clone()) {
            Ok(gc) => Some(gc),
            Err(err) => {
                log::warn!("image garbage collection disabled: {err}");
                None
            }
        };
        let mut last_run = Instant::now();
        // A nudge inside the debounce window schedules one run at its end.
        let mut scheduled: Option<Instant> = None;
        let mut image_failures = 0u32;
        loop {
            let due = scheduled
                .map(crossbeam_channel::at)
                .unwrap_or_else(crossbeam_channel::never);
            select! {
                recv(shutdown) -> _ => return,
                recv(containers) -> _ => {
                    self.collect_containers();
                    last_run = Instant::now();
                    // Upstream's QoS manager corrects its cgroups every minute too; pod
                    // workers write at a pod's start and end. Not before every source
                    // reported: the pods known so far may be a part of the node's.
                    if self.sources_ready.load(Ordering::Relaxed) {
                        self.cleaner.update_qos_cgroups();
                    }
                    // Upstream retries a refused node allocatable every minute too
                    // (evictions bring the pods' usage below it).
                    if let Some(allocatable) = self.allocatable.as_ref().filter(|a| a.pending()) {
                        allocatable.enforce();
                    }
                }
                recv(due) -> _ => {
                    scheduled = None;
                    self.collect_containers();
                    last_run = Instant::now();
                }
                recv(deaths) -> request => match request {
                    Err(_) => return,
                    Ok(GcRequest::Cleanup(work)) => self.cleaner.run(&work),
                    Ok(GcRequest::ContainerDied(_) | GcRequest::PodsFinished) => {
                        if scheduled.is_none() {
                            scheduled = Some((last_run + DEATH_DEBOUNCE).max(Instant::now()));
                        }
                    }
                },
                recv(images) -> _ => {
                    if let Some(gc) = image_gc.as_mut() {
                        let report = gc.run(&self.manager.images, &self.manager.runtime, SystemTime::now());
                        if report.errors.is_empty() {
                            image_failures = 0;
                        } else {
                            image_failures += 1;
                            let message = report.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ");
                            log::warn!("image garbage collection: {message}");
                            // Upstream reports only a repeated failure as an event.
                            if image_failures > 1 {
                                self.recorder.node(&self.node_name, EventType::Warning, "ImageGCFailed", message);
                            }
                        }
                    }
                }
            }
        }
    }

    fn collect_containers(&self) {
        let workers = &self.workers;
        let removable = |uid: &str| workers.should_pod_content_be_removed(uid);
        let errors = self.manager.garbage_collect(
            &self.policy,
            self.sources_ready.load(Ordering::Relaxed),
            &removable,
            SystemTime::now(),
        );
        if !errors.is_empty() {
            let message = errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ");
            log::warn!("container garbage collection: {message}");
            self.recorder.node(
                &self.node_name,
                EventType::Warning,
                "ContainerGCFailed",
                message,
            );
        }
    }
}
