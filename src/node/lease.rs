//! The node heartbeat lease (`kube-node-lease/<node>`, coordination.k8s.io/v1) and
//! the `lease` thread that keeps it fresh (upstream `pkg/kubelet/nodelease`).
//!
//! The thread waits for the `node` thread to say the Node exists (a [`NodeRef`] on
//! `node_refs`: the owner reference needs its UID), then every renew interval (10 s)
//! renews it: a merge patch of the holder and renewTime whose answer is asked in
//! protobuf and dropped unread (about 1 KB on the wire where a PUT of the JSON lease
//! and its answer cost 2), or a PUT of the whole lease when more than the renew time
//! changed (the owner, the duration). No GET while nothing else writes the lease. On
//! 409 it reads the lease again and retries at once; on 404 it creates the lease; any
//! other failure is retried with capped backoff (200 ms to 2 s, jittered), forever:
//! while the API server is unreachable this thread is the node's probe, so its return
//! is noticed within seconds and wakes every other loop (`api::reachability`); when
//! another thread notices it first, the lease is renewed at once. After a failure
//! streak ends, and when the lease had
//! vanished (the Node may be gone too), it asks the `node` thread to re-read the Node
//! (`resync`), since the control plane may have marked it Unknown meanwhile.
//!
//! Channels: reads `node_refs` and `shutdown`; sends on `resync` (never blocks).
//! State (the latest lease) is owned by this thread. [`desired_lease`] is pure.

use crossbeam_channel::{never, select, Receiver, Sender};

use crate::api::lease::{Lease, NODE_LEASE_NAMESPACE};
use crate::api::meta::{MicroTime, OwnerReference};
use crate::api::node::Node;
use crate::api::ratelimit::{jitter, Backoff};
use crate::api::{paths, ApiClient, ApiError, PatchType, Unread};
use crate::node::config::NodeConfig;

/// Tries of one renewal when the lease changed under us (409) or vanished (404).
const RENEW_TRIES: usize = 3;

/// The registered Node, as the lease's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub name: String,
    pub uid: String,
}

/// `base` (or a new lease) with litelet's claims asserted: holder, duration, the
/// renew time `now`, and an owner reference to the Node (replacing one to an older
/// Node of the same name). Other fields and owners are kept.
pub fn desired_lease(
    base: Option<&Lease>,
    node: &NodeRef,
    duration_seconds: i32,
    now: MicroTime,
) -> Lease {
    let mut lease = match base {
        Some(l) => l.clone(),
        None => Lease::new(&node.name, NODE_LEASE_NAMESPACE),
    };
    lease.spec.holder_identity = Some(node.name.clone());
    lease.spec.lease_duration_seconds = Some(duration_seconds);
    lease.spec.renew_time = Some(now);
    if !node.uid.is_empty() {
        let owners = &mut lease.metadata.owner_references;
        owners.retain(|o| !(o.kind == Node::KIND && o.name == node.name && o.uid != node.uid));
        if !owners
            .iter()
            .any(|o| o.kind == Node::KIND && o.uid == node.uid)
        {
            owners.push(OwnerReference {
                api_version: Node::API_VERSION.to_owned(),
                kind: Node::KIND.to_owned(),
                name: node.name.clone(),
                uid: node.uid.clone(),
                ..OwnerReference::default()
            });
        }
    }
    lease
}

/// Whether `want` differs from the lease as last written only in its renew time:
/// then a small merge patch renews it, and anything more is a PUT of the whole.
fn is_renewal(latest: &Lease, want: &Lease) -> bool {
    let mut renewed = latest.clone();
    renewed.spec.renew_time = want.spec.renew_time;
    renewed == *want
}

pub(crate) struct LeaseKeeper {
    pub client: ApiClient,
    pub config: NodeConfig,
    pub node_refs: Receiver<NodeRef>,
    pub resync: Sender<()>,
    pub shutdown: Receiver<()>,
}

/// How a renewal went.
enum Renewed {
    Ok,
    /// Written, but the lease had to be created again.
    Recreated,
}

impl LeaseKeeper {
    pub(crate) fn run(self) {
        let path = paths::node_lease(&self.config.node_name);
        let mut node_refs = self.node_refs.clone();
        let mut node = select! {
            recv(self.shutdown) -> _ => return,
            recv(node_refs) -> r => match r {
                Ok(r) => r,
                Err(_) => return,
            },
        };
        log::info!(
            "lease: keeping {path} for node {} ({})",
            node.name,
            node.uid
        );
        let mut latest: Option<Lease> = None;
        let mut backoff = Backoff::new(self.config.retry_initial, self.config.retry_max);
        let mut failing = false;
        let mut renewed_before = false;
        let reachable_again = self.client.reachability().subscribe();
        loop {
            // The Node may have been registered again (a new UID).
            while let Ok(r) = node_refs.try_recv() {
                node = r;
            }
            let delay = match self.renew(&path, &node, &mut latest) {
                Ok(how) => {
                    // The first creation is part of start-up, not news for `node`.
                    let lost = renewed_before && matches!(how, Renewed::Recreated);
                    if failing || lost {
                        if failing {
                            log::info!("lease: renewed {path} again");
                        }
                        let _ = self.resync.try_send(());
                    }
                    failing = false;
                    renewed_before = true;
                    backoff.reset();
                    self.config.node_lease_renew_interval
                }
                Err(e) => {
                    failing = true;
                    let d = jitter(backoff.next_delay()).min(self.config.node_lease_renew_interval);
                    log::warn!("lease: renew {path}: {e}; retry in {d:?}");
                    d
                }
            };
            select! {
                recv(self.shutdown) -> _ => return,
                recv(node_refs) -> r => match r {
                    Ok(r) => node = r,
                    Err(_) => node_refs = never(),
                },
                recv(reachable_again) -> _ => backoff.reset(),
                default(delay) => {}
            }
        }
    }

    /// One renewal: PUT the latest lease with a fresh renew time; read it again on
    /// 409, create it on 404.
    fn renew(
        &self,
        path: &str,
        node: &NodeRef,
        latest: &mut Option<Lease>,
    ) -> Result<Renewed, ApiError> {
        let duration = self.config.node_lease_duration_seconds;
        let mut how = Renewed::Ok;
        let mut tries = 0;
        loop {
            tries += 1;
            if latest.is_none() {
                match self.client.get::<Lease>(path) {
                    Ok(l) => *latest = Some(l),
                    Err(e) if e.is_not_found() => {
                        let want = desired_lease(None, node, duration, MicroTime::now());
                        let created = self
                            .client
                            .create(&paths::leases(NODE_LEASE_NAMESPACE), &want)?;
                        log::info!("lease: created {path}");
                        *latest = Some(created);
                        return Ok(Renewed::Recreated);
                    }
                    Err(e) => return Err(e),
                }
            }
            let want = desired_lease(latest.as_ref(), node, duration, MicroTime::now());
            let written = if latest.as_ref().is_some_and(|l| is_renewal(l, &want)) {
                // Its resourceVersion goes stale: a later PUT (an owner changed)
                // meets a conflict and reads the lease again.
                self.client
                    .patch_unread(
                        path,
                        PatchType::Merge,
                        &want.renewal_patch(),
                        Unread::Object,
                    )
                    .map(|()| want)
            } else {
                self.client.replace(path, &want)
            };
            match written {
                Ok(l) => {
                    *latest = Some(l);
                    return Ok(how);
                }
                Err(e) if (e.is_conflict() || e.is_not_found()) && tries < RENEW_TRIES => {
                    if e.is_not_found() {
                        log::info!("lease: {path} is gone; creating it again");
                        how = Renewed::Recreated;
                    } else {
                        log::debug!("lease: {e}; reading it again");
                    }
                    *latest = None;
                }
                Err(e) => {
                    if e.is_conflict() || e.is_not_found() {
                        *latest = None;
                    }
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(uid: &str) -> NodeRef {
        NodeRef {
            name: "edge-1".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn new_lease_has_holder_duration_owner() {
        let now = MicroTime::from_unix_micros(1_714_557_601_000_001);
        let l = desired_lease(None, &node("u1"), 40, now);
        let wire = serde_json::to_value(&l).unwrap();
        assert_eq!(
            wire,
            serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "edge-1", "namespace": "kube-node-lease",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                         "name": "edge-1", "uid": "u1"}]},
                "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40,
                         "renewTime": "2024-05-01T10:00:01.000001Z"}
            })
        );
    }

    #[test]
    fn renewal_keeps_the_rest_and_fixes_the_owner() {
        let t1 = MicroTime::from_unix_micros(1_000_000);
        let t2 = MicroTime::from_unix_micros(11_000_000);
        let mut base = desired_lease(None, &node("old"), 40, t1);
        base.metadata.resource_version = Some("7".into());
        base.metadata.owner_references.push(OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "x".into(),
            uid: "cm".into(),
            ..OwnerReference::default()
        });
        base.spec.lease_transitions = Some(2);
        let l = desired_lease(Some(&base), &node("new"), 40, t2);
        assert_eq!(l.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(l.spec.renew_time, Some(t2));
        assert_eq!(l.spec.lease_transitions, Some(2));
        let owners: Vec<(&str, &str)> = l
            .metadata
            .owner_references
            .iter()
            .map(|o| (o.kind.as_str(), o.uid.as_str()))
            .collect();
        assert_eq!(owners, [("ConfigMap", "cm"), ("Node", "new")]);
        // Renewing again adds nothing.
        let again = desired_lease(Some(&l), &node("new"), 40, t2);
        assert_eq!(again, l);
    }
}
