//! What turns a decoded manifest into the pod the kubelet runs:
//! - the static pod rules of upstream's `applyDefaults` (`pkg/kubelet/config/common.go`):
//!   UID (unless the manifest sets one), name `<name>-<node name in lowercase>`,
//!   namespace `default`, `spec.nodeName`, the `config.hash` and `config.source`
//!   annotations, a toleration of every NoExecute taint, phase Pending;
//! - the defaults the API server would have applied to a pod it stored
//!   (`pkg/apis/core/v1/defaults.go`), each only where the field is unset.
//!
//! Pure; called by the `static-pods` thread while parsing.

use crate::api::node::TaintEffect;
use crate::api::pod::{
    Container, ContainerPort, DnsPolicy, ImagePullPolicy, Pod, PodPhase, Probe, Protocol,
    ResourceRequirements, RestartPolicy, TerminationMessagePolicy, Toleration, TolerationOperator,
    UriScheme, Volume, CONFIG_HASH_ANNOTATION_KEY, CONFIG_SOURCE_ANNOTATION_KEY,
};
use crate::sources::SOURCE_FILE;

pub(super) const DEFAULT_NAMESPACE: &str = "default";
const DEFAULT_SCHEDULER: &str = "default-scheduler";
const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
const DEFAULT_GRACE_SECONDS: i64 = 30;
/// 0644, the API's default file mode for secret/configMap/downwardAPI/projected volumes.
const DEFAULT_VOLUME_MODE: i32 = 0o644;

/// Applies the static pod rules. `uid` is used unless the manifest set one.
pub(super) fn apply_static_rules(pod: &mut Pod, node: &str, uid: String) {
    let meta = &mut pod.metadata;
    if meta.uid.as_deref().is_none_or(str::is_empty) {
        meta.uid = Some(uid);
    }
    let name = meta.name.as_deref().unwrap_or("");
    meta.name = Some(format!("{name}-{}", node.to_lowercase()));
    if meta.namespace.as_deref().is_none_or(str::is_empty) {
        meta.namespace = Some(DEFAULT_NAMESPACE.to_owned());
    }
    let uid = meta.uid.clone().unwrap_or_default();
    meta.annotations
        .insert(CONFIG_HASH_ANNOTATION_KEY.to_owned(), uid);
    meta.annotations.insert(
        CONFIG_SOURCE_ANNOTATION_KEY.to_owned(),
        SOURCE_FILE.to_owned(),
    );
    pod.spec.node_name = Some(node.to_owned());

    // Static pods must not be evicted by node problems.
    let tolerate_all = Toleration {
        operator: Some(TolerationOperator::Exists),
        effect: Some(TaintEffect::NoExecute),
        ..Toleration::default()
    };
    if !pod.spec.tolerations.contains(&tolerate_all) {
        pod.spec.tolerations.push(tolerate_all);
    }
    pod.status.phase = Some(PodPhase::Pending);
}

/// Applies the API server's defaults where the manifest left a field unset.
pub(super) fn apply_api_defaults(pod: &mut Pod) {
    let spec = &mut pod.spec;
    spec.restart_policy.get_or_insert(RestartPolicy::Always);
    spec.dns_policy.get_or_insert(DnsPolicy::ClusterFirst);
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_GRACE_SECONDS);
    spec.scheduler_name
        .get_or_insert_with(|| DEFAULT_SCHEDULER.to_owned());
    spec.enable_service_links.get_or_insert(true);
    if let Some(r) = spec.resources.as_mut() {
        default_requests_to_limits(r);
    }
    let host_network = spec.host_network == Some(true);
    for c in spec.init_containers.iter_mut().chain(&mut spec.containers) {
        default_container(c, host_network);
        if let Some(r) = c.resources.as_mut() {
            default_requests_to_limits(r);
        }
    }
    for e in &mut spec.ephemeral_containers {
        default_container(&mut e.container, false);
    }
    for v in &mut spec.volumes {
        default_volume(v);
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    c.termination_message_path
        .get_or_insert_with(|| DEFAULT_TERMINATION_MESSAGE_PATH.to_owned());
    c.termination_message_policy
        .get_or_insert(TerminationMessagePolicy::File);
    if c.image_pull_policy.is_none() {
        c.image_pull_policy = c.image.as_deref().map(pull_policy_for_image);
    }
    for p in &mut c.ports {
        default_port(p, host_network);
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
}

/// `Always` for `:latest` or no tag (and no digest), else `IfNotPresent`.
pub(super) fn pull_policy_for_image(image: &str) -> ImagePullPolicy {
    let (name, digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    // A ':' after the last '/' starts the tag; one before it is a registry port.
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.split_once(':').map(|(_, t)| t);
    match tag {
        Some("latest") => ImagePullPolicy::Always,
        None if !digest => ImagePullPolicy::Always,
        _ => ImagePullPolicy::IfNotPresent,
    }
}

fn default_port(p: &mut ContainerPort, host_network: bool) {
    p.protocol.get_or_insert(Protocol::Tcp);
    // With the host's network the container port is the host port.
    if host_network && p.host_port.is_none_or(|h| h == 0) {
        p.host_port = Some(p.container_port);
    }
}

fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    if let Some(get) = p.handler.http_get.as_mut() {
        get.path.get_or_insert_with(|| "/".to_owned());
        get.scheme.get_or_insert(UriScheme::Http);
    }
}

/// A limit with no request makes the request equal to the limit.
fn default_requests_to_limits(r: &mut ResourceRequirements) {
    for (name, limit) in &r.limits {
        r.requests
            .entry(name.clone())
            .or_insert_with(|| limit.clone());
    }
}

fn default_volume(v: &mut Volume) {
    let no_source = v.empty_dir.is_none()
        && v.host_path.is_none()
        && v.config_map.is_none()
        && v.secret.is_none()
        && v.downward_api.is_none()
        && v.projected.is_none()
        && v.persistent_volume_claim.is_none()
        && v.extra.is_empty();
    if no_source {
        v.empty_dir = Some(Default::default());
    }
    if let Some(s) = v.secret.as_mut() {
        s.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(c) = v.config_map.as_mut() {
        c.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(d) = v.downward_api.as_mut() {
        d.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(p) = v.projected.as_mut() {
        p.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(h) = v.host_path.as_mut() {
        h.type_.get_or_insert_with(String::new);
    }
}
