//! The device manager's state and every decision over it, pure (the clock is a
//! parameter): each plugin's devices and health, which devices each container holds,
//! node capacity and allocatable, the admission check and the choice of devices for
//! a container. `manager.rs` keeps one [`DeviceState`] behind a mutex and does the
//! I/O around these calls.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::api::pod::{Container, Pod};
use crate::cgroups::pod_resources::pod_requests;
use crate::runtime::devices::DeviceRunOptions;

/// The health a plugin reports for a usable device.
pub const HEALTHY: &str = "Healthy";

/// How long a resource whose plugin went away keeps its capacity (upstream's
/// endpointStopGracePeriod): a plugin restarting within it loses nothing.
pub const STOP_GRACE: Duration = Duration::from_secs(5 * 60);

/// One resource's plugin as last seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    /// Device ID → healthy.
    pub devices: BTreeMap<String, bool>,
    /// When its plugin's stream ended (or litelet started without it); `None` while live.
    pub stopped_at: Option<Instant>,
    /// Bumped by each registration, so a replaced plugin's late stream changes nothing.
    pub generation: u64,
    /// Device ID → the NUMA nodes its plugin reported (absent: none reported), for
    /// the PodResources API.
    pub numa: BTreeMap<String, Vec<i64>>,
}

/// One device as the PodResources API reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    pub id: String,
    /// Its NUMA nodes; empty when the plugin gave no topology.
    pub numa_nodes: Vec<i64>,
}

/// The devices one container holds for one resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assigned {
    pub ids: Vec<String>,
    /// The plugin's `Allocate` answer; `None` until it came.
    pub options: Option<DeviceRunOptions>,
}

/// (pod UID, container name).
pub type ContainerKey = (String, String);

/// Why a pod cannot have the devices it asks for (upstream's wording, which the
/// admission refusal wraps).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}")]
pub struct Unavailable {
    pub resource: String,
    pub requested: i64,
    pub available: i64,
}

#[derive(Clone, Debug, Default)]
pub struct DeviceState {
    resources: BTreeMap<String, Resource>,
    /// Container → resource → its devices.
    allocations: BTreeMap<ContainerKey, BTreeMap<String, Assigned>>,
}

/// How many devices of `resource` a container asks for: its limit (extended
/// resources cannot be overcommitted, so request = limit), else its request.
pub fn container_need(container: &Container, resource: &str) -> i64 {
    let Some(r) = container.resources.as_ref() else {
        return 0;
    };
    r.limits
        .get(resource)
        .or_else(|| r.requests.get(resource))
        .map(|q| q.value())
        .unwrap_or(0)
}

impl DeviceState {
    /// A plugin (re)registered `resource`: it replaces any earlier one. Returns the
    /// generation its stream reports with. The old devices stay until the first list.
    pub fn register(&mut self, resource: &str) -> u64 {
        let entry = self.resources.entry(resource.to_owned()).or_default();
        entry.generation += 1;
        entry.stopped_at = None;
        entry.generation
    }

    /// A `ListAndWatch` answer: the full device list. False when `generation` is stale.
    pub fn set_devices(
        &mut self,
        resource: &str,
        generation: u64,
        devices: impl IntoIterator<Item = (String, bool)>,
    ) -> bool {
        match self.resources.get_mut(resource) {
            Some(r) if r.generation == generation => {
                r.devices = devices.into_iter().collect();
                true
            }
            _ => false,
        }
    }

    /// The NUMA nodes of each device in the plugin's latest list (only devices with
    /// a topology); ignored when `generation` is stale.
    pub fn set_topology(
        &mut self,
        resource: &str,
        generation: u64,
        numa: BTreeMap<String, Vec<i64>>,
    ) {
        if let Some(r) = self
            .resources
            .get_mut(resource)
            .filter(|r| r.generation == generation)
        {
            r.numa = numa;
        }
    }

    fn device_info(&self, resource: &str, id: &str) -> DeviceInfo {
        let numa_nodes = self
            .resources
            .get(resource)
            .and_then(|r| r.numa.get(id))
            .cloned()
            .unwrap_or_default();
        DeviceInfo {
            id: id.to_owned(),
            numa_nodes,
        }
    }

    /// What `key` holds, per resource, with each device's topology as its plugin
    /// last reported it.
    pub fn container_devices(&self, key: &ContainerKey) -> BTreeMap<String, Vec<DeviceInfo>> {
        self.allocations
            .get(key)
            .map(|held| {
                held.iter()
                    .map(|(resource, a)| {
                        let devices = a.ids.iter().map(|id| self.device_info(resource, id));
                        (resource.clone(), devices.collect())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every healthy device per resource (held or free), with its topology.
    pub fn healthy_devices(&self) -> BTreeMap<String, Vec<DeviceInfo>> {
        self.resources
            .iter()
            .map(|(resource, r)| {
                let healthy = r.devices.iter().filter(|(_, healthy)| **healthy);
                let devices = healthy.map(|(id, _)| self.device_info(resource, id));
                (resource.clone(), devices.collect::<Vec<_>>())
            })
            .filter(|(_, devices)| !devices.is_empty())
            .collect()
    }

    /// The plugin's stream ended at `now`: its devices turn unhealthy (out of
    /// allocatable at once) and, after [`STOP_GRACE`], out of capacity too. False
    /// when a newer registration already replaced it.
    pub fn stopped(&mut self, resource: &str, generation: u64, now: Instant) -> bool {
        match self.resources.get_mut(resource) {
            Some(r) if r.generation == generation => {
                r.stopped_at = Some(now);
                r.devices.values_mut().for_each(|h| *h = false);
                true
            }
            _ => false,
        }
    }

    /// A resource known from the checkpoint, whose plugin has not registered since
    /// litelet started: zero capacity until it does (upstream's stopped endpoint).
    pub fn restore_resource(&mut self, resource: &str, now: Instant) {
        self.resources
            .entry(resource.to_owned())
            .or_insert_with(|| Resource {
                stopped_at: Some(now),
                ..Resource::default()
            });
    }

    pub fn resource(&self, resource: &str) -> Option<&Resource> {
        self.resources.get(resource)
    }

    /// The resources device plugins serve (live or within their grace).
    pub fn serves(&self, resource: &str) -> bool {
        self.resources.contains_key(resource)
    }

    /// Capacity (all devices) and allocatable (healthy ones) per resource at `now`;
    /// a plugin gone longer than the grace reports zero for both (upstream keeps the
    /// name at zero so the node status drops the count).
    pub fn capacity(&self, now: Instant) -> BTreeMap<String, (i64, i64)> {
        self.resources
            .iter()
            .map(|(name, r)| {
                let expired = r
                    .stopped_at
                    .is_some_and(|t| now.saturating_duration_since(t) >= STOP_GRACE);
                if expired {
                    return (name.clone(), (0, 0));
                }
                let all = r.devices.len() as i64;
                let healthy = r.devices.values().filter(|h| **h).count() as i64;
                (name.clone(), (all, healthy))
            })
            .collect()
    }

    /// Admission: does every device-plugin resource `pod` asks for have enough free
    /// healthy devices, given the `active` pods' requests (the pod itself not among
    /// them)? Devices the pod already holds (a pod admitted again after a litelet
    /// restart, from the checkpoint) count as its own, whatever the plugin says yet.
    /// Extended resources no plugin serves are the predicates' business.
    pub fn admit(&self, pod: &Pod, active: &[&Pod], now: Instant) -> Result<(), Unavailable> {
        let wanted = pod_requests(pod);
        let capacity = self.capacity(now);
        for (resource, quantity) in &wanted {
            let Some((_, healthy)) = capacity.get(resource) else {
                continue;
            };
            let requested = quantity.value();
            let held: i64 = self
                .allocations
                .iter()
                .filter(|((uid, _), _)| uid == pod.uid())
                .filter_map(|(_, m)| m.get(resource))
                .map(|a| a.ids.len() as i64)
                .sum();
            if requested <= 0 || requested <= held {
                continue;
            }
            let used: i64 = active
                .iter()
                .filter(|p| p.uid() != pod.uid())
                .map(|p| {
                    pod_requests(p)
                        .get(resource)
                        .map(|q| q.value())
                        .unwrap_or(0)
                })
                .sum();
            let available = (healthy - used).max(0);
            if requested > available {
                return Err(Unavailable {
                    resource: resource.clone(),
                    requested,
                    available,
                });
            }
        }
        Ok(())
    }

    /// What `key` already holds of `resource`.
    pub fn assigned(&self, key: &ContainerKey, resource: &str) -> Option<&Assigned> {
        self.allocations.get(key).and_then(|m| m.get(resource))
    }

    /// Healthy devices of `resource` nobody holds, in ID order.
    pub fn free(&self, resource: &str) -> Vec<String> {
        self.free_for(resource, &[])
    }

    /// Healthy devices of `resource` free for a container that may take over what
    /// the containers in `reusable` hold (its pod's finished init containers, as
    /// upstream's devicesToReuse), in ID order.
    pub fn free_for(&self, resource: &str, reusable: &[ContainerKey]) -> Vec<String> {
        let held: BTreeSet<&String> = self
            .allocations
            .iter()
            .filter(|(key, _)| !reusable.contains(key))
            .filter_map(|(_, m)| m.get(resource))
            .flat_map(|a| a.ids.iter())
            .collect();
        self.resources
            .get(resource)
            .map(|r| {
                r.devices
                    .iter()
                    .filter(|(id, healthy)| **healthy && !held.contains(id))
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Gives `key` `needed` distinct free devices of `resource`, those in
    /// `preferred` (the plugin's GetPreferredAllocation answer) first when still
    /// free; a preference naming a device twice, one not free or fewer than needed
    /// is topped up from the other free devices. What the `reusable` containers
    /// hold counts as free.
    pub fn pick(
        &mut self,
        key: &ContainerKey,
        resource: &str,
        needed: i64,
        preferred: &[String],
        reusable: &[ContainerKey],
    ) -> Result<Vec<String>, Unavailable> {
        let free = self.free_for(resource, reusable);
        let count = usize::try_from(needed).unwrap_or(0);
        if free.len() < count {
            return Err(Unavailable {
                resource: resource.to_owned(),
                requested: needed,
                available: free.len() as i64,
            });
        }
        // As upstream: the preference as a set, only what is free, topped up from
        // the other free devices; a device never twice.
        let mut ids: Vec<String> = Vec::with_capacity(count);
        for id in preferred.iter().chain(&free) {
            if ids.len() == count {
                break;
            }
            if free.contains(id) && !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        self.allocations.entry(key.clone()).or_default().insert(
            resource.to_owned(),
            Assigned {
                ids: ids.clone(),
                options: None,
            },
        );
        Ok(ids)
    }

    /// Records the plugin's `Allocate` answer for what `key` holds.
    pub fn set_options(&mut self, key: &ContainerKey, resource: &str, options: DeviceRunOptions) {
        if let Some(a) = self
            .allocations
            .get_mut(key)
            .and_then(|m| m.get_mut(resource))
        {
            a.options = Some(options);
        }
    }

    /// Gives back what `key` holds of `resource` (its Allocate failed).
    pub fn release(&mut self, key: &ContainerKey, resource: &str) {
        if let Some(m) = self.allocations.get_mut(key) {
            m.remove(resource);
            if m.is_empty() {
                self.allocations.remove(key);
            }
        }
    }

    /// Frees the devices of every pod not in `active` (terminated or gone); true when
    /// something was freed.
    pub fn retain_pods(&mut self, active: &BTreeSet<String>) -> bool {
        let before = self.allocations.len();
        self.allocations.retain(|(uid, _), _| active.contains(uid));
        self.allocations.len() != before
    }

    /// Every allocation, for the checkpoint.
    pub fn allocations(&self) -> &BTreeMap<ContainerKey, BTreeMap<String, Assigned>> {
        &self.allocations
    }

    /// Restores one checkpointed allocation (a device named twice, once).
    pub fn restore_allocation(
        &mut self,
        key: ContainerKey,
        resource: String,
        mut assigned: Assigned,
    ) {
        let mut seen = BTreeSet::new();
        assigned.ids.retain(|id| seen.insert(id.clone()));
        self.allocations
            .entry(key)
            .or_default()
            .insert(resource, assigned);
    }

    /// The device IDs each resource had, for the checkpoint's registered devices.
    pub fn registered(&self) -> BTreeMap<String, Vec<String>> {
        self.resources
            .iter()
            .map(|(name, r)| (name.clone(), r.devices.keys().cloned().collect()))
            .collect()
    }
}

#[cfg(test)]
mod tests;
