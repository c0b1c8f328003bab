//! The `node` thread: registers the Node, then keeps its status current (upstream
//! `registerWithAPIServer` + `syncNodeStatus`).
//!
//! Registration creates the Node with labels, taints and the full first status. When
//! the name is taken it reads the Node, patches litelet's labels back if they drifted
//! (taints are left alone) and reports status at once. Failures are retried with
//! capped, jittered backoff, forever. Once registered, the Node's UID goes to the
//! `lease` thread on `node_refs`.
//!
//! Every `nodeStatusUpdateFrequency` (10 s) the thread computes the status from the
//! latest Node it knows (no GET): the one the `node-watch` thread last delivered when
//! that is later than its own copy, else its own copy with the status it last sent. It
//! PATCHes `nodes/<name>/status` only when something other than heartbeat times
//! changed, or `nodeStatusReportFrequency` (5 min) passed since the last report; the
//! answer (the whole Node again, about as large as the watch event that follows) is
//! asked as protobuf metadata and not read.
//! After a failed request, or when the `lease` thread asks on `resync` (its outage
//! ended, or the lease vanished), the Node is read again first, so a status the control
//! plane changed meanwhile (Unknown conditions, a deleted Node) is seen. A Node that
//! has been deleted is registered again. When the API server answers again after an
//! outage (`api::reachability`), the status is synced at once (and registration
//! retried with its back-off started over) instead of at the next tick.
//!
//! Channels: reads `resync` and `shutdown`; sends on `node_refs`. State (the API's
//! Node, the last report time) is owned by this thread.

use std::time::Instant;

use crossbeam_channel::{never, select, Receiver, Sender};

use crate::api::meta::Time;
use crate::api::node::{Node, NodeStatus};
use crate::api::ratelimit::{jitter, Backoff};
use crate::api::{paths, ApiClient, ApiError, PatchType, Unread};
use crate::events::{EventType, Recorder};
use crate::node::config::NodeConfig;
use crate::node::inputs::NodeInputs;
use crate::node::lease::NodeRef;
use crate::node::lister::NodeLister;
use crate::node::machine::MachineInfo;
use crate::node::register::{initial_node, previous_boot, reconcile_patch};
use crate::node::status::{self, ConditionEvent, StatusInputs};

pub(crate) struct Updater {
    pub client: ApiClient,
    pub config: NodeConfig,
    pub inputs: NodeInputs,
    /// The Node as the watch delivers it: what others wrote (the control plane's
    /// conditions, a label) reaches the status computation from here.
    pub watched: NodeLister,
    pub recorder: Recorder,
    pub node_refs: Sender<NodeRef>,
    pub resync: Receiver<()>,
    pub shutdown: Receiver<()>,
}

/// The thread's state between ticks.
#[derive(Default)]
struct State {
    /// The Node as the API server last returned it (or the watch delivered it), with
    /// the status since sent; `None` until registered.
    node: Option<Node>,
    /// When the status was last sent (creation counts).
    last_report: Option<Instant>,
    /// Read the Node again before the next computation.
    stale: bool,
    /// Machine problems last logged (logged again only when they change).
    problems: Vec<String>,
}

impl Updater {
    pub(crate) fn run(mut self) {
        let name = self.config.node_name.clone();
        let mut state = State::default();
        let mut backoff = Backoff::new(self.config.retry_initial, self.config.retry_max);
        let mut resync = self.resync.clone();
        let mut sync_now = self.inputs.sync_now.take().unwrap_or_else(never);
        let mut devices_changed = self.inputs.devices_changed.take().unwrap_or_else(never);
        let mut volumes_changed = self
            .inputs
            .volumes
            .as_ref()
            .map_or_else(never, |v| v.changes());
        let reachable_again = self.client.reachability().subscribe();
        loop {
            let delay = if state.node.is_none() {
                match self.register(&mut state) {
                    Ok(()) => {
                        backoff.reset();
                        self.sync_status(&mut state);
                        self.config.node_status_update_frequency
                    }
                    Err(e) => {
                        let d = jitter(backoff.next_delay());
                        log::warn!("node: register {name}: {e}; retry in {d:?}");
                        d
                    }
                }
            } else {
                self.sync_status(&mut state);
                self.config.node_status_update_frequency
            };
            select! {
                recv(self.shutdown) -> _ => return,
                recv(resync) -> r => match r {
                    Ok(()) => state.stale = true,
                    Err(_) => resync = never(),
                },
                recv(sync_now) -> r => if r.is_err() {
                    sync_now = never();
                },
                recv(devices_changed) -> r => if r.is_err() {
                    devices_changed = never();
                },
                recv(volumes_changed) -> r => if r.is_err() {
                    volumes_changed = never();
                },
                recv(reachable_again) -> _ => {
                    state.stale = true;
                    backoff.reset();
                }
                default(delay) => {}
            }
        }
    }

    /// Reads the machine, logging its problems when they change.
    fn machine(&mut self, state: &mut State) -> MachineInfo {
        let (info, problems) = (self.inputs.machine)();
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        if text != state.problems {
            for p in &text {
                log::warn!("node: machine: {p}");
            }
            state.problems = text;
        }
        info
    }

    /// Applies the inputs to `status` at `now`; returns the machine facts used and the
    /// condition events.
    fn compute(
        &mut self,
        state: &mut State,
        status: &mut NodeStatus,
        now: Time,
    ) -> (MachineInfo, Vec<ConditionEvent>) {
        let machine = self.machine(state);
        let health = (self.inputs.health)();
        let version = (self.inputs.runtime_version)();
        let images = self
            .inputs
            .images
            .as_mut()
            .and_then(|f| f())
            .map(|listed| status::node_images(&listed));
        let inputs = StatusInputs {
            config: &self.config,
            machine: &machine,
            health: &health,
            runtime_version: version.as_deref(),
            images: images.as_deref(),
            now,
        };
        let events = status::apply(status, &inputs);
        if let Some(devices) = self.inputs.devices.as_mut() {
            status::apply_devices(status, &devices());
        }
        if let Some(volumes) = &self.inputs.volumes {
            status.volumes_in_use = volumes.volumes_in_use();
        }
        (machine, events)
    }

    /// Tells the volume manager which volumes the API server now lists as in use
    /// (upstream marks them from the Node it wrote, or read when nothing changed).
    fn mark_volumes(&self, node: &Node) {
        if let Some(volumes) = &self.inputs.volumes {
            volumes.mark_reported_in_use(&node.status.volumes_in_use);
        }
    }

    fn record(&self, events: &[ConditionEvent]) {
        let name = &self.config.node_name;
        for e in events {
            self.recorder.node(
                name,
                EventType::Normal,
                e.reason,
                format!("Node {name} status is now: {}", e.reason),
            );
        }
    }

    /// Creates the Node, or adopts and reconciles the existing one.
    fn register(&mut self, state: &mut State) -> Result<(), ApiError> {
        let name = self.config.node_name.clone();
        let mut status = NodeStatus::default();
        let (machine, events) = self.compute(state, &mut status, Time::now());
        let wanted = initial_node(&self.config, &machine.architecture, status);
        log::info!("node: registering {name}");
        let node = match self.client.create(&paths::nodes(), &wanted) {
            Ok(created) => {
                log::info!("node: registered {name} ({})", created.uid());
                self.record(&events);
                state.last_report = Some(Instant::now());
                self.mark_volumes(&created);
                created
            }
            Err(e) if e.is_already_exists() => {
                let mut existing: Node = self.client.get(&paths::node(&name))?;
                log::info!("node: {name} was registered before ({})", existing.uid());
                if let Some(patch) = reconcile_patch(&existing, &wanted) {
                    log::info!("node: reconciling labels of {name}: {patch}");
                    existing = self
                        .client
                        .patch(&paths::node(&name), PatchType::Merge, &patch)?;
                }
                if let Some(old) = previous_boot(&existing, &machine.boot_id) {
                    self.recorder.node(
                        &name,
                        EventType::Warning,
                        "Rebooted",
                        format!(
                            "Node {name} has been rebooted, boot id: {} (was {old})",
                            machine.boot_id
                        ),
                    );
                }
                // Its status is whatever an earlier run left: report at once.
                state.last_report = None;
                existing
            }
            Err(e) => return Err(e),
        };
        let _ = self.node_refs.send(NodeRef {
            name: name.clone(),
            uid: node.uid().to_owned(),
        });
        state.node = Some(node);
        state.stale = false;
        Ok(())
    }

    /// One status tick: refresh the Node if stale, compute, send when needed.
    fn sync_status(&mut self, state: &mut State) {
        let name = self.config.node_name.clone();
        let path = paths::node(&name);
        if state.stale {
            match self.client.get::<Node>(&path) {
                Ok(n) => {
                    state.node = Some(n);
                    state.stale = false;
                }
                Err(e) => {
                    self.failed(state, &e);
                    return;
                }
            }
        }
        self.adopt_watched(state);
        let Some(base) = state.node.as_ref().map(|n| n.status.clone()) else {
            return;
        };
        let mut new = base.clone();
        let (_, events) = self.compute(state, &mut new, Time::now());
        let changed = status::status_changed(&base, &new);
        let since = state.last_report.map(|t| t.elapsed());
        if !status::should_report(changed, since, self.config.node_status_report_frequency) {
            if let Some(node) = &state.node {
                self.mark_volumes(node);
            }
            return;
        }
        let patch = status::status_patch(&base, &new);
        match self.client.patch_unread(
            &paths::node_status(&name),
            PatchType::StrategicMerge,
            &patch,
            Unread::Metadata,
        ) {
            Ok(()) => {
                log::debug!("node: status of {name} sent (changed: {changed})");
                self.record(&events);
                if let Some(node) = state.node.as_mut() {
                    node.status = new;
                    self.mark_volumes(node);
                }
                state.last_report = Some(Instant::now());
            }
            Err(e) => self.failed(state, &e),
        }
    }

    /// Takes the watched Node as the base when it is a later version of the same Node
    /// than ours (our own patch comes back that way too).
    fn adopt_watched(&self, state: &mut State) {
        let (Some(ours), Some(watched)) = (state.node.as_ref(), self.watched.node()) else {
            return;
        };
        if watched.metadata.is_later_than(&ours.metadata) && ours.uid() == watched.uid() {
            state.node = Some(Node::clone(&watched));
        }
    }

    fn failed(&self, state: &mut State, e: &ApiError) {
        let name = &self.config.node_name;
        if e.is_not_found() {
            log::warn!("node: {name} is gone from the API server; registering it again");
            state.node = None;
            state.last_report = None;
        } else {
            log::warn!("node: update status of {name}: {e}");
        }
        state.stale = true;
    }
}
