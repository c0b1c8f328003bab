//! persistentVolumeClaim and generic ephemeral volumes: from a pod's claim to the
//! PersistentVolume that backs it (upstream `volumemanager/populator`
//! `getPVCExtractPV` and `getPVSpec`), and what that volume's source is.
//!
//! The decisions ([`check_claim`], [`check_ephemeral_owner`], [`source_of`],
//! [`local_fits_node`]) are pure and tested as tables; [`Claims`] is the thin shell
//! that reads the PVC, the PV and the Node with the node's own credentials (the
//! Node authorizer allows a node to get the claims and volumes of pods bound to it).
//! Called from pod worker threads; no lock, no cache (a claim is read at each set-up
//! of a pod whose volume is not yet ready).

use std::collections::BTreeMap;

use crate::api::node::Node;
pub use crate::api::persistent_volume::{
    CsiSource, PersistentVolume, PersistentVolumeClaim, PvSpec, VolumeNodeAffinity,
};
use crate::api::{paths, ApiClient, ApiError};

/// Why a claim's volume cannot be used (yet).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ClaimError {
    #[error("persistentVolumeClaim {namespace}/{name} is not bound (phase {phase:?}): waiting")]
    NotBound {
        namespace: String,
        name: String,
        phase: String,
    },
    #[error("persistentVolume {pv} is not bound to claim {namespace}/{name} (uid {uid}): its claimRef is {claim_ref}")]
    WrongClaim {
        pv: String,
        namespace: String,
        name: String,
        uid: String,
        claim_ref: String,
    },
    #[error("persistentVolumeClaim {namespace}/{name} was not created for pod {pod} (generic ephemeral volume)")]
    NotOwnedByPod {
        namespace: String,
        name: String,
        pod: String,
    },
    #[error("persistentVolume {pv} has no source litelet supports ({kinds})")]
    UnsupportedSource { pv: String, kinds: String },
    #[error("local persistentVolume {pv} cannot be used on node {node}: its node affinity does not match the node's labels")]
    WrongNode { pv: String, node: String },
}

/// The source of a bound PV, as the volume manager sets it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PvSource {
    HostPath { path: String, type_: Option<String> },
    Local { path: String },
    Csi(CsiSource),
}

/// A claim resolved to its volume.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub pv_name: String,
    pub source: PvSource,
    pub access_modes: Vec<String>,
    /// The PV's own readOnly (csi.readOnly); the pod's claim readOnly is added by
    /// the caller.
    pub read_only: bool,
    /// The PV's `mountOptions` (CSI: the capability's mount flags).
    pub mount_options: Vec<String>,
}

/// The claim must be Bound to a PV whose claimRef names it, UID included (a PV
/// bound to an older claim of the same name is refused).
pub fn check_claim(
    namespace: &str,
    name: &str,
    claim: &PersistentVolumeClaim,
    pv: Option<&PersistentVolume>,
) -> Result<(), ClaimError> {
    let phase = claim.status.phase.clone().unwrap_or_default();
    let volume = claim.spec.volume_name.as_deref().unwrap_or("");
    if phase != "Bound" || volume.is_empty() {
        return Err(ClaimError::NotBound {
            namespace: namespace.into(),
            name: name.into(),
            phase,
        });
    }
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let claim_ref = pv.and_then(|pv| pv.spec.claim_ref.as_ref());
    match claim_ref {
        Some(r) if r.namespace == namespace && r.name == name && r.uid == uid => Ok(()),
        other => Err(ClaimError::WrongClaim {
            pv: volume.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid,
            claim_ref: other.map_or("empty".into(), |r| {
                format!("{}/{} (uid {})", r.namespace, r.name, r.uid)
            }),
        }),
    }
}

/// A generic ephemeral volume's claim must be controlled by the pod (upstream's
/// "PVC was not created for pod" check).
pub fn check_ephemeral_owner(
    claim: &PersistentVolumeClaim,
    pod_uid: &str,
) -> Result<(), ClaimError> {
    let owned = claim
        .metadata
        .owner_references
        .iter()
        .any(|o| o.kind == "Pod" && o.uid == pod_uid && o.controller == Some(true));
    if owned {
        return Ok(());
    }
    Err(ClaimError::NotOwnedByPod {
        namespace: claim.metadata.namespace.clone().unwrap_or_default(),
        name: claim.metadata.name.clone().unwrap_or_default(),
        pod: pod_uid.into(),
    })
}

/// The source litelet sets up for `pv` (hostPath, local or csi).
pub fn source_of(pv: &PersistentVolume) -> Result<Resolved, ClaimError> {
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let spec = &pv.spec;
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(ClaimError::UnsupportedSource {
            pv: pv_name,
            kinds: "volumeMode Block".into(),
        });
    }
    let (source, read_only) = if let Some(h) = &spec.host_path {
        let source = PvSource::HostPath {
            path: h.path.clone(),
            type_: h.type_.clone(),
        };
        (source, false)
    } else if let Some(l) = &spec.local {
        (
            PvSource::Local {
                path: l.path.clone(),
            },
            false,
        )
    } else if let Some(c) = &spec.csi {
        (PvSource::Csi(c.clone()), c.read_only.unwrap_or(false))
    } else {
        let kinds: Vec<&str> = spec.extra.keys().map(String::as_str).collect();
        return Err(ClaimError::UnsupportedSource {
            pv: pv_name,
            kinds: match kinds.is_empty() {
                true => "none".into(),
                false => kinds.join(", "),
            },
        });
    };
    Ok(Resolved {
        pv_name,
        source,
        access_modes: spec.access_modes.clone(),
        read_only,
        mount_options: spec.mount_options.clone(),
    })
}

/// A local PV may only be used where its required node affinity matches
/// (upstream's local plugin checks it at mount time as a last guard).
pub fn local_fits_node(
    pv: &PersistentVolume,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), ClaimError> {
    let Some(affinity) = pv
        .spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.as_pod_affinity())
    else {
        return Ok(());
    };
    let mut probe = crate::api::pod::Pod::default();
    probe.spec.affinity = Some(affinity);
    if crate::admission::affinity::matches_node(&probe, node, labels) {
        return Ok(());
    }
    Err(ClaimError::WrongNode {
        pv: pv.metadata.name.clone().unwrap_or_default(),
        node: node.into(),
    })
}

/// Reads claims, volumes and the node's labels from the API server.
pub struct Claims<'a> {
    pub api: &'a ApiClient,
    pub node: &'a str,
}

/// A failure reading or checking a claim.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error("get {what}: {source}")]
    Fetch { what: String, source: Box<ApiError> },
}

impl Claims<'_> {
    fn get<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        what: String,
        path: &str,
    ) -> Result<T, ResolveError> {
        self.api.get(path).map_err(|e| ResolveError::Fetch {
            what,
            source: Box::new(e),
        })
    }

    /// Claim `namespace/name` resolved to its PV; `owner` (a pod UID) for generic
    /// ephemeral volumes, whose claim the pod must own.
    pub fn resolve(
        &self,
        namespace: &str,
        name: &str,
        owner: Option<&str>,
    ) -> Result<Resolved, ResolveError> {
        let claim: PersistentVolumeClaim = self.get(
            format!("persistentVolumeClaim {namespace}/{name}"),
            &paths::persistent_volume_claim(namespace, name),
        )?;
        if let Some(pod_uid) = owner {
            check_ephemeral_owner(&claim, pod_uid)?;
        }
        // The claim is checked before its PV is read: an unbound claim names none.
        check_claim(namespace, name, &claim, None).or_else(|e| match e {
            ClaimError::WrongClaim { .. } => Ok(()),
            other => Err(other),
        })?;
        let pv_name = claim.spec.volume_name.clone().unwrap_or_default();
        let pv: PersistentVolume = self.get(
            format!("persistentVolume {pv_name}"),
            &paths::persistent_volume(&pv_name),
        )?;
        check_claim(namespace, name, &claim, Some(&pv))?;
        let resolved = source_of(&pv)?;
        if matches!(resolved.source, PvSource::Local { .. }) {
            let node: Node = self.get(format!("node {}", self.node), &paths::node(self.node))?;
            local_fits_node(&pv, self.node, &node.metadata.labels)?;
        }
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests;
