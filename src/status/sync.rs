//! The `status` thread: sends cached pod statuses to the API server (upstream
//! `syncBatch` / `syncPod` in `status_manager.go`).
//!
//! One loop, [`run`], selects on: shutdown; the coalescing wake-up channel (one slot)
//! the handles signal after each change; a ticker for the full reconcile (10 s); a
//! timer for the earliest retry; and the client's "reachable again" signal
//! (`api::reachability`): when the API server answers after an outage, every pod
//! waiting for a retry is retried at once with its back-off started over, so the
//! statuses of the outage reach it within seconds. Being the only writer of pod
//! statuses, it never races itself.
//!
//! Syncing one pod: GET it by namespace/name (a static pod's status goes to its mirror
//! pod: the API pod whose `kubernetes.io/config.mirror` annotation equals the static
//! pod's `kubernetes.io/config.hash`); merge the cached status over the API copy
//! (`merge.rs`); PATCH `pods/<name>/status` only when the merge differs from the API
//! copy, with `metadata.uid` as precondition; record the version dealt with. Then, if
//! the API copy has a deletionTimestamp and a terminal phase, the pod is finished and
//! the pod workers say it may go (never a mirror pod), DELETE it with grace 0 and the
//! UID precondition.
//!
//! Outcomes: 404 on GET or no mirror pod yet → remembered as missing and looked at
//! again on each full reconcile (cache kept); 403 on GET, PATCH or DELETE → the Node
//! authorizer no longer lets this node see the pod (deleted, namespace gone): it is
//! forgotten like a recreated one, without retries, unless the node's pod watch still
//! shows the pod (the authorizer lags a fresh binding): then it is retried; another UID under the name → the
//! pod was recreated: its cached status is dropped; any other failure (409 included) → the
//! version is not recorded and the pod is retried after a jittered, doubling delay
//! (capped at the resync period), starting with a fresh GET.
//!
//! Invariants: a version is recorded only once the API server has it (or had it
//! already), so nothing is lost and nothing equal is sent twice, also after a restart
//! (the first sync of each pod compares with the API copy); the cache lock is never
//! held while calling a hook or the network; a terminal phase on the server is never
//! replaced by a non-terminal one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{at, never, select_biased, tick, Receiver, TryRecvError};

use crate::api::meta::Time;
use crate::api::patch::{pod_status_patch, require_resource_version};
use crate::api::pod::{Pod, PodStatus, CONFIG_HASH_ANNOTATION_KEY, CONFIG_MIRROR_ANNOTATION_KEY};
use crate::api::ratelimit::{jitter, Backoff};
use crate::api::{paths, ApiClient, ApiError, DeleteOptions, PatchType};

use super::cache::VersionedStatus;
use super::has_terminal_phase;
use super::merge::merge_pod_status;
use super::normalize::{is_status_equal_by_kubelet, normalize_status};
use super::shared::{Options, PodHooks, Shared};

/// What the thread knows about one pod's API object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Known {
    /// Version of the cached status last dealt with: sent, found already on the
    /// server, or found with no API object to send it to.
    version: u64,
    /// No API object at the last try (404, or no mirror pod yet).
    missing: bool,
    /// The API copy had a deletionTimestamp and a terminal phase and is not a mirror
    /// pod: deleting it is retried on each full reconcile.
    deletion_pending: bool,
}

/// A pod whose last sync failed.
struct Retry {
    at: Instant,
    backoff: Backoff,
}

/// How the API object found under the pod's name relates to the pod.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    /// The pod itself, or the static pod's mirror pod.
    Same,
    /// Another pod under the same name: ours was deleted and the name reused.
    Recreated,
    /// A static pod with no mirror pod (yet), or an API pod that mirrors something else.
    NoMirror,
}

fn identity(ours: &Pod, api: &Pod) -> Identity {
    if ours.is_static() {
        let hash = ours.metadata.annotation(CONFIG_HASH_ANNOTATION_KEY);
        let mirror_of = api.metadata.annotation(CONFIG_MIRROR_ANNOTATION_KEY);
        if hash.is_some() && mirror_of == hash {
            Identity::Same
        } else {
            Identity::NoMirror
        }
    } else if api.uid() == ours.uid() {
        Identity::Same
    } else {
        Identity::Recreated
    }
}

/// The server refuses to move a pod out of a terminal phase, and the kubelet agrees:
/// once the API copy is terminal, its phase, reason and message stay.
fn keep_terminal_phase(api: &PodStatus, merged: &mut PodStatus) {
    if has_terminal_phase(api) && !has_terminal_phase(merged) {
        merged.phase = api.phase.clone();
        merged.reason = api.reason.clone();
        merged.message = api.message.clone();
    }
}

/// An API copy whose pod the kubelet should delete once it is finished.
/// Is the watched pod a later version than our written copy? resourceVersions are
/// opaque by API convention, so only two that parse as numbers (etcd revisions, what
/// kube-apiserver gives) are compared; otherwise, and for a static pod (whose API
/// object is its mirror pod), the written copy stays the base. A wrong guess costs
/// a 409 and a GET, as a stale written copy does.
fn newer(watched: &Pod, written: &Pod) -> bool {
    !watched.is_static() && watched.metadata.is_later_than(&written.metadata)
}

fn awaits_deletion(api: &Pod) -> bool {
    api.deletion_requested() && !api.is_mirror() && has_terminal_phase(&api.status)
}

fn shutting_down(shutdown: &Receiver<()>) -> bool {
    !matches!(shutdown.try_recv(), Err(TryRecvError::Empty))
}

/// The loop of the `status` thread.
pub(super) fn run(
    shared: Arc<Shared>,
    client: ApiClient,
    hooks: PodHooks,
    options: Options,
    wake: Receiver<()>,
    shutdown: Receiver<()>,
) {
    let mut syncer = Syncer {
        shared,
        client,
        hooks,
        options,
        known: HashMap::new(),
        retries: HashMap::new(),
        written: HashMap::new(),
    };
    let resync = tick(options.resync_period);
    let reachable_again = syncer.client.reachability().subscribe();
    loop {
        let retry = syncer.next_retry().map_or_else(never, at);
        select_biased! {
            recv(shutdown) -> _ => return,
            recv(reachable_again) -> _ => {
                syncer.retry_all_now(Instant::now());
                syncer.batch(true, &shutdown);
            }
            recv(wake) -> msg => {
                if msg.is_err() {
                    return;
                }
                syncer.batch(false, &shutdown);
            }
            recv(resync) -> _ => syncer.batch(true, &shutdown),
            recv(retry) -> _ => syncer.batch(false, &shutdown),
        }
    }
}

struct Syncer {
    shared: Arc<Shared>,
    client: ApiClient,
    hooks: PodHooks,
    options: Options,
    /// By pod UID (the static pod's, for mirror pods).
    known: HashMap<String, Known>,
    retries: HashMap<String, Retry>,
    /// The API copy our last PATCH returned (metadata and status only), by pod UID:
    /// the base of the next patch, sent with its resourceVersion as a precondition,
    /// which saves the GET before each PATCH. A 409 (someone else wrote the pod
    /// since) drops it and the sync reads the pod again.
    written: HashMap<String, Pod>,
}

impl Syncer {
    fn next_retry(&self) -> Option<Instant> {
        self.retries.values().map(|r| r.at).min()
    }

    /// The API server answers again: every waiting retry is due now, its back-off
    /// started over.
    fn retry_all_now(&mut self, now: Instant) {
        for retry in self.retries.values_mut() {
            retry.at = now;
            retry.backoff.reset();
        }
    }

    /// Wanted without asking any hook: a due retry, or a version not yet dealt with.
    /// A pod waiting for its retry is left alone.
    fn unsent(&self, uid: &str, v: &VersionedStatus, now: Instant) -> Option<bool> {
        if let Some(r) = self.retries.get(uid) {
            return Some(r.at <= now);
        }
        match self.known.get(uid) {
            None => Some(true),
            Some(k) if k.version < v.version => Some(true),
            Some(_) => None,
        }
    }

    /// Full reconcile only: a missing API object, a deletion the pod workers may now
    /// allow, or an API copy someone else changed.
    fn needs_reconcile(&self, uid: &str, v: &VersionedStatus) -> bool {
        let known = self.known.get(uid).cloned().unwrap_or_default();
        if known.missing {
            return true;
        }
        let api = self.hooks.api_pod.as_ref().and_then(|f| f(uid));
        let deletion = known.deletion_pending || api.as_ref().is_some_and(awaits_deletion);
        if deletion && v.finished && !v.pod.is_static() && (self.hooks.may_delete)(uid) {
            return true;
        }
        let Some(api) = api else { return false };
        let mut api_status = api.status;
        normalize_status(&v.pod, &mut api_status);
        !is_status_equal_by_kubelet(&api_status, &v.status)
    }

    /// One pass over the cache: every pod with a new version (and, when `all`, every
    /// pod needing a reconcile) is synced, in no particular order. A full pass that
    /// ran to its end is counted (`Shared::reconcile_passed`).
    fn batch(&mut self, all: bool, shutdown: &Receiver<()>) {
        let now = Instant::now();
        let mut work = Vec::new();
        let mut reconcile = Vec::new();
        {
            let cache = self.shared.cache();
            // A retry of a pod the cache no longer has would be due forever and wake
            // this loop at once, again and again, until the next full reconcile.
            self.retries.retain(|uid, _| cache.get(uid).is_some());
            if all {
                self.known.retain(|uid, _| cache.get(uid).is_some());
                // `cache` first, then `sent` (the order `Shared` documents).
                self.shared.sent().retain(|uid, _| cache.get(uid).is_some());
                self.written.retain(|uid, _| cache.get(uid).is_some());
            }
            for (uid, v) in cache.iter() {
                match self.unsent(uid, v, now) {
                    Some(true) => work.push((uid.clone(), v.clone())),
                    Some(false) => {}
                    None if all => reconcile.push((uid.clone(), v.clone())),
                    None => {}
                }
            }
        }
        // Hooks are asked with the cache unlocked: they take the pod workers' locks.
        let reconcile: Vec<_> = reconcile
            .into_iter()
            .filter(|(uid, v)| self.needs_reconcile(uid, v))
            .collect();
        let work = work.into_iter().map(|w| (w, false));
        for ((uid, v), reread) in work.chain(reconcile.into_iter().map(|w| (w, true))) {
            if shutting_down(shutdown) {
                return;
            }
            self.sync_pod(&uid, &v, reread);
        }
        if all {
            self.shared.reconcile_passed();
        }
    }

    fn sync_pod(&mut self, uid: &str, v: &VersionedStatus, reread: bool) {
        let reread = reread || self.retries.contains_key(uid);
        match self.try_sync(uid, v, reread) {
            Ok(()) => {
                self.retries.remove(uid);
            }
            Err(e) => {
                let options = self.options;
                let retry = self.retries.entry(uid.to_owned()).or_insert_with(|| Retry {
                    at: Instant::now(),
                    backoff: Backoff::new(options.retry_initial, options.retry_max),
                });
                let delay = jitter(retry.backoff.next_delay());
                retry.at = Instant::now() + delay;
                log::warn!(
                    "status of pod {}/{} ({uid}) not synced, retrying in {delay:?}: {e}",
                    v.pod.namespace(),
                    v.pod.name()
                );
            }
        }
    }

    fn mark_missing(&mut self, uid: &str, version: u64) {
        self.written.remove(uid);
        self.record(
            uid,
            Known {
                version,
                missing: true,
                deletion_pending: false,
            },
        );
    }

    /// Remembers what the API server has of the pod, here and for
    /// `StatusManager::wait_sent`.
    fn record(&mut self, uid: &str, known: Known) {
        self.shared.sent().insert(uid.to_owned(), known.version);
        self.known.insert(uid.to_owned(), known);
    }

    /// Forgets a pod whose API object is gone for good.
    fn forget(&mut self, uid: &str) {
        self.shared.cache().remove(uid);
        self.shared.sent().remove(uid);
        self.known.remove(uid);
        self.written.remove(uid);
        self.retries.remove(uid);
    }

    /// A 403 on the pod. The Node authorizer answers so for a pod no longer bound to
    /// this node, which is as gone as a 404 and will not come back; but also, for a
    /// moment, for a pod bound just now, before its graph has caught up. While the
    /// node's own watch still shows the pod, the 403 is the latter: an error to retry
    /// with back-off (forgetting would lose a status such as an admission rejection).
    fn forbidden(&mut self, uid: &str, v: &VersionedStatus, e: ApiError) -> Result<(), ApiError> {
        let (ns, name) = (v.pod.namespace(), v.pod.name());
        if self
            .hooks
            .watch_shows
            .as_ref()
            .is_some_and(|shows| shows(uid))
        {
            log::debug!("pod {ns}/{name} ({uid}): 403 while the watch still shows it; retrying");
            return Err(e);
        }
        log::info!(
            "pod {ns}/{name} ({uid}) is no longer visible to this node; forgetting its status: {e}"
        );
        self.forget(uid);
        Ok(())
    }

    /// The API copy to patch against: our last write while the pod is not being
    /// deleted (its resourceVersion then guards the patch), else a fresh GET. None
    /// when the pod is not in the API.
    fn base(&mut self, uid: &str, v: &VersionedStatus) -> Result<Option<(Pod, bool)>, ApiError> {
        if v.pod.metadata.deletion_timestamp.is_none() {
            if let Some(pod) = self.written.get(uid) {
                // A spec change since our write (an in-place resize) moved the
                // resourceVersion on: the watched copy is then the newer one, and
                // patching on it saves a certain 409 and its GET.
                let base = if newer(&v.pod, pod) {
                    v.pod.as_ref()
                } else {
                    pod
                };
                return Ok(Some((base.clone(), true)));
            }
        }
        let (ns, name) = (v.pod.namespace(), v.pod.name());
        match self.client.get(&paths::pod(ns, name)) {
            Ok(p) => Ok(Some((p, false))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `reread`: base the patch on a fresh GET even when our last write is known (a
    /// reconcile, which exists because the server copy changed, or a retry).
    fn try_sync(&mut self, uid: &str, v: &VersionedStatus, reread: bool) -> Result<(), ApiError> {
        match self.sync_once(uid, v, reread) {
            Err(e) if e.is_conflict() && self.written.remove(uid).is_some() => {
                log::debug!(
                    "pod {} ({uid}) changed since our last write; reading it again",
                    v.pod.full_name()
                );
                self.sync_once(uid, v, true)
            }
            other => other,
        }
    }

    fn sync_once(&mut self, uid: &str, v: &VersionedStatus, reread: bool) -> Result<(), ApiError> {
        let started = Instant::now();
        let (ns, name) = (v.pod.namespace(), v.pod.name());
        if reread {
            self.written.remove(uid);
        }
        let base = match self.base(uid, v) {
            Err(e) if e.is_forbidden() => return self.forbidden(uid, v, e),
            other => other?,
        };
        let Some((api_pod, cached)) = base else {
            log::debug!("pod {ns}/{name} ({uid}) not found in the api; status kept");
            self.mark_missing(uid, v.version);
            return Ok(());
        };
        match identity(&v.pod, &api_pod) {
            Identity::Same => {}
            Identity::Recreated => {
                log::info!(
                    "pod {ns}/{name} was recreated ({uid} → {}); dropping its status",
                    api_pod.uid()
                );
                self.forget(uid);
                return Ok(());
            }
            Identity::NoMirror => {
                log::debug!("static pod {ns}/{name} ({uid}) has no mirror pod yet");
                self.mark_missing(uid, v.version);
                return Ok(());
            }
        }
        let could_run = (self.hooks.could_have_running_containers)(uid);
        let mut merged = merge_pod_status(&api_pod.status, &v.status, could_run, Time::now());
        keep_terminal_phase(&api_pod.status, &mut merged);
        let api_pod = match pod_status_patch(api_pod.uid(), &api_pod.status, &merged)? {
            None => api_pod,
            Some(mut patch) => {
                if cached {
                    let version = api_pod.metadata.resource_version.as_deref();
                    require_resource_version(&mut patch, version.unwrap_or_default());
                }
                let path = paths::pod_status(ns, name);
                match self
                    .client
                    .patch::<Pod>(&path, PatchType::StrategicMerge, &patch)
                {
                    Ok(mut p) => {
                        log::debug!(
                            "status of pod {ns}/{name} ({uid}) sent, version {} in {:?} ({})",
                            v.version,
                            started.elapsed(),
                            if cached {
                                "patch only"
                            } else {
                                "read, then patch"
                            }
                        );
                        // Nothing below reads the spec: drop it before the copy.
                        p.spec = Default::default();
                        self.written.insert(uid.to_owned(), p.clone());
                        p
                    }
                    Err(e) if e.is_not_found() => {
                        self.mark_missing(uid, v.version);
                        return Ok(());
                    }
                    Err(e) if e.is_forbidden() => return self.forbidden(uid, v, e),
                    Err(e) => return Err(e),
                }
            }
        };
        let deletion_pending = awaits_deletion(&api_pod);
        // A terminal phase held back (containers could still run) is not sent yet:
        // leave the version unsent so the reconcile tries again.
        let held_back = has_terminal_phase(&v.status) && !has_terminal_phase(&api_pod.status);
        let sent = if held_back {
            v.version.saturating_sub(1)
        } else {
            v.version
        };
        self.record(
            uid,
            Known {
                version: sent,
                missing: false,
                deletion_pending,
            },
        );
        if deletion_pending && v.finished && !v.pod.is_static() && (self.hooks.may_delete)(uid) {
            let opts = DeleteOptions {
                grace_period_seconds: Some(0),
                precondition_uid: Some(api_pod.uid().to_owned()),
                ..DeleteOptions::default()
            };
            match self.client.delete(&paths::pod(ns, name), &opts) {
                Ok(()) => log::info!("pod {ns}/{name} ({uid}) deleted from the api"),
                Err(e) if e.is_not_found() || e.is_forbidden() => {}
                Err(e) => return Err(e),
            }
            self.forget(uid);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{PodPhase, CONFIG_SOURCE_ANNOTATION_KEY, SOURCE_FILE};

    fn pod(uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn identity_of_api_objects() {
        assert_eq!(identity(&pod("a"), &pod("a")), Identity::Same);
        assert_eq!(identity(&pod("a"), &pod("b")), Identity::Recreated);
        let mut stat = pod("hash1");
        let ann = &mut stat.metadata.annotations;
        ann.insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_FILE.into());
        ann.insert(CONFIG_HASH_ANNOTATION_KEY.into(), "hash1".into());
        // A plain API pod under the static pod's name is not its mirror.
        assert_eq!(identity(&stat, &pod("m1")), Identity::NoMirror);
        let mut mirror = pod("m1");
        mirror
            .metadata
            .annotations
            .insert(CONFIG_MIRROR_ANNOTATION_KEY.into(), "hash1".into());
        assert_eq!(identity(&stat, &mirror), Identity::Same);
        mirror
            .metadata
            .annotations
            .insert(CONFIG_MIRROR_ANNOTATION_KEY.into(), "old".into());
        assert_eq!(identity(&stat, &mirror), Identity::NoMirror);
    }

    #[test]
    fn terminal_phase_on_the_server_stays() {
        let api = PodStatus {
            phase: Some(PodPhase::Failed),
            reason: Some("Evicted".into()),
            ..Default::default()
        };
        let mut merged = PodStatus {
            phase: Some(PodPhase::Running),
            ..Default::default()
        };
        keep_terminal_phase(&api, &mut merged);
        assert_eq!(merged.phase, Some(PodPhase::Failed));
        assert_eq!(merged.reason.as_deref(), Some("Evicted"));
        // Terminal to terminal is the kubelet's call.
        let mut merged = PodStatus {
            phase: Some(PodPhase::Succeeded),
            ..Default::default()
        };
        keep_terminal_phase(&api, &mut merged);
        assert_eq!(merged.phase, Some(PodPhase::Succeeded));
    }

    #[test]
    fn deletion_candidates() {
        let mut p = pod("a");
        assert!(!awaits_deletion(&p));
        p.metadata.deletion_timestamp = Some(Time::from_unix_seconds(1));
        p.status.phase = Some(PodPhase::Running);
        assert!(!awaits_deletion(&p));
        p.status.phase = Some(PodPhase::Failed);
        assert!(awaits_deletion(&p));
        p.metadata
            .annotations
            .insert(CONFIG_MIRROR_ANNOTATION_KEY.into(), "h".into());
        assert!(!awaits_deletion(&p));
    }

    fn at(uid: &str, rv: &str) -> Pod {
        let mut p = pod(uid);
        p.metadata.resource_version = Some(rv.into());
        p
    }

    #[test]
    fn only_a_numerically_later_watched_copy_replaces_our_write() {
        assert!(newer(&at("a", "120"), &at("a", "99")));
        assert!(!newer(&at("a", "99"), &at("a", "120")));
        assert!(!newer(&at("a", "120"), &at("a", "120")));
        // Opaque versions are not compared.
        assert!(!newer(&at("a", "v2"), &at("a", "1")));
        assert!(!newer(&pod("a"), &at("a", "1")));
        let mut stat = at("hash1", "500");
        let ann = &mut stat.metadata.annotations;
        ann.insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_FILE.into());
        assert!(
            !newer(&stat, &at("m1", "1")),
            "a static pod is not its mirror"
        );
    }
}
