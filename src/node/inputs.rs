//! What the `node` thread asks the rest of litelet before each status computation
//! ([`NodeInputs`]: machine facts, health, runtime version, as closures so tests
//! hand in fixed values), and the production wiring over the CRI runtime and the PLEG
//! ([`NodeInputs::from_host`]).
//!
//! [`RuntimeState`] is upstream's runtimeState in pure form: it remembers the last CRI
//! Status answer and turns it, the time since the last good answer and the PLEG's
//! health into the Ready condition's error messages. The closures run on the `node`
//! thread only; each CRI call has the client's deadline.

use std::time::{Duration, Instant};

use crate::cri::{pb, RuntimeClient};
use crate::node::machine::{MachineError, MachineInfo, MachineReader};
use crate::node::status::Health;
use crate::pleg::PlegHealth;

/// With no good runtime Status answer for this long, the runtime counts as down.
pub const RUNTIME_DOWN_AFTER: Duration = Duration::from_secs(30);

/// Reads the machine (facts and the problems met).
pub type MachineFn = Box<dyn FnMut() -> (MachineInfo, Vec<MachineError>) + Send>;
/// Reports the runtime, network and PLEG health and the pressure signals.
pub type HealthFn = Box<dyn FnMut() -> Health + Send>;
/// `<runtime name>://<version>`, or `None` while the runtime cannot be asked.
pub type VersionFn = Box<dyn FnMut() -> Option<String> + Send>;

/// The `node` thread's view of the rest of litelet.
pub struct NodeInputs {
    pub machine: MachineFn,
    pub health: HealthFn,
    pub runtime_version: VersionFn,
}

/// The runtime's own Ready conditions, as last reported by CRI Status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeState {
    /// When Status last said RuntimeReady=true.
    last_ready: Option<Instant>,
    runtime_error: Option<String>,
    network_error: Option<String>,
}

/// Upstream's rendering of a runtime condition: `Type=bool reason:... message:...`.
fn describe(c: &pb::RuntimeCondition) -> String {
    format!(
        "{}={} reason:{} message:{}",
        c.type_, c.status, c.reason, c.message
    )
}

impl RuntimeState {
    /// Records a successful Status answer's conditions at `now`. A failed call is not
    /// recorded: the previous answer stands until [`RUNTIME_DOWN_AFTER`] passes.
    pub fn record(&mut self, now: Instant, conditions: &[pb::RuntimeCondition]) {
        let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
        self.network_error = match find("NetworkReady") {
            Some(c) if c.status => None,
            Some(c) => Some(format!(
                "container runtime network not ready: {}",
                describe(c)
            )),
            None => Some(
                "container runtime network not ready: NetworkReady condition not reported"
                    .to_owned(),
            ),
        };
        match find("RuntimeReady") {
            Some(c) if c.status => {
                self.runtime_error = None;
                self.last_ready = Some(now);
            }
            Some(c) => {
                self.runtime_error = Some(format!("container runtime not ready: {}", describe(c)))
            }
            None => {
                self.runtime_error = Some(
                    "container runtime not ready: RuntimeReady condition not reported".to_owned(),
                )
            }
        }
    }

    /// The runtime and network errors at `now`, with the PLEG's verdict.
    pub fn errors(&self, now: Instant, pleg: Result<(), String>) -> (Vec<String>, Vec<String>) {
        let mut runtime = Vec::new();
        match self.last_ready {
            None => {
                runtime.push("container runtime status check may not have completed yet".to_owned())
            }
            Some(at) if now.saturating_duration_since(at) > RUNTIME_DOWN_AFTER => {
                runtime.push("container runtime is down".to_owned())
            }
            Some(_) => {}
        }
        if let Err(e) = pleg {
            runtime.push(e);
        }
        if let Some(e) = &self.runtime_error {
            runtime.push(e.clone());
        }
        (runtime, self.network_error.iter().cloned().collect())
    }
}

impl NodeInputs {
    /// Production inputs: the machine from `reader`, health from CRI Status and the
    /// PLEG, the version from CRI Version (the last good answer is kept). No pressure
    /// is reported until an eviction manager exists.
    pub fn from_host(reader: MachineReader, runtime: RuntimeClient, pleg: PlegHealth) -> Self {
        let started = Instant::now();
        let status_client = runtime.clone();
        let mut state = RuntimeState::default();
        let health = move || {
            let now = Instant::now();
            let request = pb::StatusRequest::default();
            match status_client.status(&request) {
                Ok(resp) => {
                    let conditions = resp
                        .status
                        .as_ref()
                        .map(|s| s.conditions.clone())
                        .unwrap_or_default();
                    state.record(now, &conditions);
                }
                Err(e) => log::debug!("node: runtime status: {e}"),
            }
            let (runtime_errors, network_errors) = state.errors(now, pleg.check(now, started));
            Health {
                runtime_errors,
                network_errors,
                ..Health::default()
            }
        };
        let mut last_version: Option<String> = None;
        let version = move || {
            match runtime.check_version() {
                Ok(v) => last_version = Some(format!("{}://{}", v.runtime_name, v.runtime_version)),
                Err(e) => log::debug!("node: runtime version: {e}"),
            }
            last_version.clone()
        };
        NodeInputs {
            machine: Box::new(move || reader.read()),
            health: Box::new(health),
            runtime_version: Box::new(version),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(type_: &str, status: bool, reason: &str, message: &str) -> pb::RuntimeCondition {
        pb::RuntimeCondition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }
    }

    #[test]
    fn runtime_state_messages() {
        let t0 = Instant::now();
        let mut s = RuntimeState::default();
        let (rt, net) = s.errors(t0, Ok(()));
        assert_eq!(
            rt,
            ["container runtime status check may not have completed yet"]
        );
        assert!(net.is_empty());

        s.record(
            t0,
            &[
                cond("RuntimeReady", true, "", ""),
                cond(
                    "NetworkReady",
                    false,
                    "NetworkPluginNotReady",
                    "Network plugin returns error: cni plugin not initialized",
                ),
            ],
        );
        let (rt, net) = s.errors(t0 + Duration::from_secs(5), Ok(()));
        assert!(rt.is_empty(), "{rt:?}");
        assert_eq!(
            net,
            ["container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"]
        );

        // Status calls fail for a while: the runtime is down past the threshold.
        let later = t0 + RUNTIME_DOWN_AFTER + Duration::from_secs(1);
        let (rt, _) = s.errors(later, Err("pleg is not healthy: stale".into()));
        assert_eq!(
            rt,
            ["container runtime is down", "pleg is not healthy: stale"]
        );

        // The runtime answers but is not ready.
        s.record(
            later,
            &[
                cond("RuntimeReady", false, "Booting", "wait"),
                cond("NetworkReady", true, "", ""),
            ],
        );
        let (rt, net) = s.errors(later, Ok(()));
        assert_eq!(
            rt,
            [
                "container runtime is down",
                "container runtime not ready: RuntimeReady=false reason:Booting message:wait"
            ]
        );
        assert!(net.is_empty());

        s.record(later, &[]);
        let (rt, net) = s.errors(later, Ok(()));
        assert!(rt
            .iter()
            .any(|e| e.contains("RuntimeReady condition not reported")));
        assert!(net[0].contains("NetworkReady condition not reported"));
    }
}
