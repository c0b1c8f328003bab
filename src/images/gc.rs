//! Image garbage collection (upstream images/image_gc_manager.go): when the filesystem
//! holding images is fuller than the high threshold, remove unused images, least
//! recently used first, until it is back at the low threshold; and, with
//! `imageMaximumGCAge`, remove unused images not used for that long whatever the
//! usage (upstream's freeOldImages), once litelet has itself collected for that long.
//!
//! [`ImageRecords`] remembers per image ID when litelet first saw it and when it last
//! saw a container use it; it is updated from ListImages + ListContainers on every run.
//! The decisions ([`ImageRecords::observe`], [`pressure`], [`eviction_order`]) are pure
//! with `now` passed in; [`ImageGc::run`] is the shell: it lists, measures the
//! filesystem (statvfs of the mountpoint ImageFsInfo names, injectable for tests),
//! decides, and removes.
//!
//! Called from the GC thread (every 5 minutes upstream). The records sit behind one
//! mutex that is never held across a CRI call.
//!
//! Invariants: an image that any container uses (running or not, matched by ID, tag or
//! digest) is never removed, nor a pinned one, nor the sandbox image (pinned by newer
//! runtimes; containerd 1.6 does not pin it but names it in its verbose status, and
//! the policy can name more), nor one first seen less than `min_age` ago. Images present at the first run count as
//! seen long ago, as upstream; an image never used counts as used long ago (upstream's
//! zero lastUsed). A high threshold of 100 % turns the usage-based collection off.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cri::{pb, CriError, ImageClient, RuntimeClient};

/// When to collect images (upstream ImageGCPolicy; the kubelet's defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// Usage at or above this percentage starts a collection
    /// (`imageGCHighThresholdPercent`); 100 turns image GC off.
    pub high_threshold_percent: u8,
    /// A collection frees space down to this percentage (`imageGCLowThresholdPercent`).
    pub low_threshold_percent: u8,
    /// An image first seen less than this long ago stays (`--minimum-image-ttl-duration`).
    pub min_age: Duration,
    /// References never removed, e.g. the sandbox image (upstream protects its
    /// `--pod-infra-container-image` the same way).
    pub protected_images: Vec<String>,
    /// `imageMaximumGCAge`: an unused image not used for longer goes whatever the
    /// disk usage; zero turns this off (upstream's default).
    pub max_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            protected_images: Vec::new(),
            max_age: Duration::ZERO,
        }
    }
}

impl ImageGcPolicy {
    /// Thresholds are percentages and low may not exceed high; a maximum age, when
    /// set, exceeds the minimum age (upstream's checks).
    pub fn validate(&self) -> Result<(), ImageGcError> {
        let (high, low) = (self.high_threshold_percent, self.low_threshold_percent);
        if high > 100 || low > 100 || low > high {
            return Err(ImageGcError::InvalidPolicy { high, low });
        }
        if !self.max_age.is_zero() && self.max_age <= self.min_age {
            return Err(ImageGcError::InvalidMaxAge {
                max: self.max_age,
                min: self.min_age,
            });
        }
        Ok(())
    }
}

/// Size and free space of a filesystem, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsStats {
    pub capacity_bytes: u64,
    /// Space an unprivileged writer can still use (statvfs `f_bavail`).
    pub available_bytes: u64,
}

/// Measures the filesystem mounted at (or holding) a path.
pub type FsStatsFn = dyn Fn(&Path) -> io::Result<FsStats> + Send + Sync;

/// The real measurement: statvfs.
// The statvfs field types differ between platforms; on Linux some are already u64.
#[allow(clippy::unnecessary_cast)]
pub fn statvfs_stats(path: &Path) -> io::Result<FsStats> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    let unit = stat.fragment_size() as u64;
    Ok(FsStats {
        capacity_bytes: (stat.blocks() as u64).saturating_mul(unit),
        available_bytes: (stat.blocks_available() as u64).saturating_mul(unit),
    })
}

/// A failed image GC step.
#[derive(Debug, thiserror::Error)]
pub enum ImageGcError {
    #[error(
        "image gc: invalid thresholds high {high}% low {low}%: both must be 0-100 and low <= high"
    )]
    InvalidPolicy { high: u8, low: u8 },
    #[error("image gc: imageMaximumGCAge {max:?} must be greater than imageMinimumGCAge {min:?}")]
    InvalidMaxAge { max: Duration, min: Duration },
    #[error("image gc: listing images: {source}")]
    ListImages { source: CriError },
    #[error("image gc: listing containers: {source}")]
    ListContainers { source: CriError },
    #[error("image gc: reading the runtime's status for its sandbox image: {source}")]
    RuntimeStatus { source: CriError },
    #[error("image gc: reading image filesystem info: {source}")]
    ImageFsInfo { source: CriError },
    #[error("image gc: the runtime names no image filesystem mountpoint")]
    NoImageFs,
    #[error("image gc: measuring image filesystem {mountpoint}: {source}")]
    FsStats {
        mountpoint: String,
        source: io::Error,
    },
    #[error("image gc: image filesystem {mountpoint} reports capacity 0")]
    InvalidCapacity { mountpoint: String },
    #[error("image gc: removing image {id}: {source}")]
    RemoveImage { id: String, source: CriError },
    #[error("image gc: wanted to free {wanted} bytes but only {freed} bytes of images could go")]
    NotEnoughFreed { wanted: u64, freed: u64 },
}

/// An image as ListImages reports it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ListedImage {
    pub id: String,
    /// Repo tags and repo digests.
    pub names: Vec<String>,
    pub size: u64,
    pub pinned: bool,
}

impl ListedImage {
    pub fn from_cri(image: &pb::Image) -> ListedImage {
        ListedImage {
            id: image.id.clone(),
            names: image
                .repo_tags
                .iter()
                .chain(image.repo_digests.iter())
                .cloned()
                .collect(),
            size: image.size,
            pinned: image.pinned,
        }
    }
}

/// What litelet knows about one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRecord {
    /// When litelet first listed it (the epoch for images present at the first run).
    pub first_seen: SystemTime,
    /// When litelet last saw a container using it; None if never.
    pub last_used: Option<SystemTime>,
    pub size: u64,
    pub pinned: bool,
}

/// The records of all images the runtime has, by image ID.
#[derive(Debug, Default)]
pub struct ImageRecords {
    records: BTreeMap<String, ImageRecord>,
    /// When the first listing was taken: litelet's image GC began then.
    first_run: Option<SystemTime>,
}

/// The image references containers use: their image ID (`image_ref`) and the image
/// as they name it.
pub fn used_references(containers: &[pb::Container]) -> HashSet<String> {
    let mut used = HashSet::new();
    for c in containers {
        if !c.image_ref.is_empty() {
            used.insert(c.image_ref.clone());
        }
        if let Some(image) = c.image.as_ref().filter(|i| !i.image.is_empty()) {
            used.insert(image.image.clone());
        }
    }
    used
}

/// The sandbox image a runtime names in its verbose status: containerd's
/// `config.sandboxImage`. None when the runtime says nothing of it.
pub fn sandbox_image_from_info(info: &HashMap<String, String>) -> Option<String> {
    let config: serde_json::Value = serde_json::from_str(info.get("config")?).ok()?;
    let image = config.get("sandboxImage")?.as_str()?;
    (!image.is_empty()).then(|| image.to_owned())
}

/// A reference in the fully qualified form runtimes list: the default registry and
/// `library/` added to Docker Hub names, `:latest` added when there is neither tag
/// nor digest.
pub fn normalize_reference(reference: &str) -> String {
    let (name, digest) = match reference.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (reference, None),
    };
    let name = match name.split_once('/') {
        None => format!("docker.io/library/{name}"),
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => name.to_owned(),
        Some(_) => format!("docker.io/{name}"),
    };
    let last = name.rsplit('/').next().unwrap_or(&name);
    match digest {
        Some(digest) => format!("{name}@{digest}"),
        None if last.contains(':') => name,
        None => format!("{name}:latest"),
    }
}

impl ImageRecords {
    /// Takes in a listing at `now`: new images get a first-seen time (the epoch on the
    /// first call), used ones a last-used time, vanished ones are forgotten. Returns
    /// the IDs of the images in use (ID, tag or digest among `used`).
    pub fn observe(
        &mut self,
        images: &[ListedImage],
        used: &HashSet<String>,
        now: SystemTime,
    ) -> HashSet<String> {
        let first_seen = match self.first_run {
            Some(_) => now,
            None => UNIX_EPOCH,
        };
        self.first_run.get_or_insert(now);
        let mut in_use = HashSet::new();
        for image in images {
            let record = self
                .records
                .entry(image.id.clone())
                .or_insert_with(|| ImageRecord {
                    first_seen,
                    last_used: None,
                    size: 0,
                    pinned: false,
                });
            record.size = image.size;
            record.pinned = image.pinned;
            if used.contains(&image.id) || image.names.iter().any(|n| used.contains(n)) {
                record.last_used = Some(now);
                in_use.insert(image.id.clone());
            }
        }
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| present.contains(id.as_str()));
        in_use
    }

    pub fn get(&self, id: &str) -> Option<&ImageRecord> {
        self.records.get(id)
    }

    /// Forgets a removed image.
    pub fn forget(&mut self, id: &str) {
        self.records.remove(id);
    }
}

/// How full the image filesystem is and how much to free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pressure {
    /// Used share of the filesystem, in whole percent (rounded up).
    pub usage_percent: u8,
    /// Bytes to free to reach the low threshold; 0 below the high threshold.
    pub to_free: u64,
}

/// The usage of the filesystem and, at or above the high threshold, the bytes to free
/// to get down to the low one. None for a filesystem of capacity 0.
pub fn pressure(stats: FsStats, policy: &ImageGcPolicy) -> Option<Pressure> {
    let capacity = u128::from(stats.capacity_bytes);
    if capacity == 0 {
        return None;
    }
    let available = u128::from(stats.available_bytes).min(capacity);
    let usage = 100 - available * 100 / capacity;
    let usage_percent = u8::try_from(usage).unwrap_or(100);
    let to_free = if usage_percent >= policy.high_threshold_percent {
        let target_available =
            capacity * u128::from(100 - policy.low_threshold_percent.min(100)) / 100;
        u64::try_from(target_available.saturating_sub(available)).unwrap_or(u64::MAX)
    } else {
        0
    };
    Some(Pressure {
        usage_percent,
        to_free,
    })
}

/// The images that may go, in the order they should: never used (or used longest
/// ago) first, then first seen earliest, then by ID. In-use, pinned and too young
/// images are left out.
pub fn eviction_order<'a>(
    records: &'a ImageRecords,
    in_use: &HashSet<String>,
    policy: &ImageGcPolicy,
    now: SystemTime,
) -> Vec<(&'a str, u64)> {
    let mut candidates: Vec<(&str, &ImageRecord)> = records
        .records
        .iter()
        .filter(|(id, r)| {
            let old_enough = now
                .duration_since(r.first_seen)
                .is_ok_and(|age| age >= policy.min_age);
            !in_use.contains(*id) && !r.pinned && old_enough
        })
        .map(|(id, r)| (id.as_str(), r))
        .collect();
    candidates.sort_by(|(a_id, a), (b_id, b)| {
        a.last_used
            .cmp(&b.last_used)
            .then(a.first_seen.cmp(&b.first_seen))
            .then(a_id.cmp(b_id))
    });
    candidates.into_iter().map(|(id, r)| (id, r.size)).collect()
}

/// The unused images whose last use (for one never used: the epoch) is more than
/// `policy.max_age` before `now`, in eviction order; none before litelet has itself
/// watched images for `max_age` (a restart must not remove images whose use it has
/// not seen yet) or when `max_age` is zero. Upstream's freeOldImages, with one
/// difference on purpose: an image first seen less than `min_age` ago stays, so a
/// pull whose container is not created yet is never undone.
pub fn expired_images<'a>(
    records: &'a ImageRecords,
    in_use: &HashSet<String>,
    policy: &ImageGcPolicy,
    now: SystemTime,
) -> Vec<(&'a str, u64)> {
    let max_age = policy.max_age;
    let watched = records
        .first_run
        .and_then(|began| now.duration_since(began).ok());
    if max_age.is_zero() || watched.is_none_or(|watched| watched <= max_age) {
        return Vec::new();
    }
    eviction_order(records, in_use, policy, now)
        .into_iter()
        .filter(|(id, _)| {
            let last_used = records
                .get(id)
                .and_then(|r| r.last_used)
                .unwrap_or(UNIX_EPOCH);
            now.duration_since(last_used)
                .is_ok_and(|unused| unused > max_age)
        })
        .collect()
}

/// What one image GC run saw and did.
#[derive(Debug, Default)]
pub struct ImageGcReport {
    /// Usage of the image filesystem when measured.
    pub usage_percent: Option<u8>,
    /// Bytes the run tried to free.
    pub wanted_bytes: u64,
    /// Bytes of the images it removed (their listed sizes).
    pub freed_bytes: u64,
    /// IDs of the images removed to free space, in removal order.
    pub removed: Vec<String>,
    /// IDs of the images removed for being unused longer than `max_age`.
    pub expired: Vec<String>,
    pub errors: Vec<ImageGcError>,
}

/// The image garbage collector: its policy, records and filesystem probe.
pub struct ImageGc {
    policy: ImageGcPolicy,
    records: Mutex<ImageRecords>,
    fs_stats: Box<FsStatsFn>,
}

impl ImageGc {
    /// An image GC that measures the image filesystem with statvfs.
    pub fn new(policy: ImageGcPolicy) -> Result<ImageGc, ImageGcError> {
        ImageGc::with_fs_stats(policy, Box::new(statvfs_stats))
    }

    /// An image GC with its own filesystem probe (tests).
    pub fn with_fs_stats(
        policy: ImageGcPolicy,
        fs_stats: Box<FsStatsFn>,
    ) -> Result<ImageGc, ImageGcError> {
        policy.validate()?;
        Ok(ImageGc {
            policy,
            records: Mutex::new(ImageRecords::default()),
            fs_stats,
        })
    }

    pub fn policy(&self) -> &ImageGcPolicy {
        &self.policy
    }

    fn lock(&self) -> MutexGuard<'_, ImageRecords> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the record of one image.
    pub fn record(&self, id: &str) -> Option<ImageRecord> {
        self.lock().get(id).cloned()
    }

    /// One run: update the records, measure, and when usage is at or above the high
    /// threshold remove unused images until the low threshold is reached.
    pub fn run(
        &self,
        images: &ImageClient,
        runtime: &RuntimeClient,
        now: SystemTime,
    ) -> ImageGcReport {
        let mut report = ImageGcReport::default();
        let in_use = match self.detect(images, runtime, now) {
            Ok(in_use) => in_use,
            Err(err) => {
                report.errors.push(err);
                return self.logged(report);
            }
        };
        self.free_expired(images, &in_use, now, &mut report);
        if self.policy.high_threshold_percent >= 100 {
            return self.logged(report);
        }
        let pressure = match self.measure(images) {
            Ok(p) => p,
            Err(err) => {
                report.errors.push(err);
                return self.logged(report);
            }
        };
        report.usage_percent = Some(pressure.usage_percent);
        if pressure.to_free > 0 {
            log::info!(
                "image gc: image filesystem at {}% (high threshold {}%), freeing {} bytes",
                pressure.usage_percent,
                self.policy.high_threshold_percent,
                pressure.to_free
            );
            self.free(images, &in_use, pressure.to_free, now, &mut report);
        }
        self.logged(report)
    }

    /// Removes every unused image that may go, whatever the usage (upstream
    /// DeleteUnusedImages, for disk pressure).
    pub fn delete_unused(
        &self,
        images: &ImageClient,
        runtime: &RuntimeClient,
        now: SystemTime,
    ) -> ImageGcReport {
        let mut report = ImageGcReport::default();
        match self.detect(images, runtime, now) {
            Ok(in_use) => self.free(images, &in_use, u64::MAX, now, &mut report),
            Err(err) => report.errors.push(err),
        }
        // Running out of images is not a failure here.
        report
            .errors
            .retain(|e| !matches!(e, ImageGcError::NotEnoughFreed { .. }));
        self.logged(report)
    }

    fn logged(&self, report: ImageGcReport) -> ImageGcReport {
        for err in &report.errors {
            log::warn!("{err}");
        }
        report
    }

    /// Lists images and containers and updates the records; returns the in-use IDs
    /// (the protected and sandbox images count as in use).
    fn detect(
        &self,
        images: &ImageClient,
        runtime: &RuntimeClient,
        now: SystemTime,
    ) -> Result<HashSet<String>, ImageGcError> {
        let listed: Vec<ListedImage> = images
            .list_images(&pb::ListImagesRequest::default())
            .map_err(|source| ImageGcError::ListImages { source })?
            .images
            .iter()
            .map(ListedImage::from_cri)
            .collect();
        let containers = runtime
            .list_containers(&pb::ListContainersRequest::default())
            .map_err(|source| ImageGcError::ListContainers { source })?
            .containers;
        let mut used = used_references(&containers);
        let status = runtime
            .status(&pb::StatusRequest {
                verbose: true,
                ..Default::default()
            })
            .map_err(|source| ImageGcError::RuntimeStatus { source })?;
        let sandbox_image = sandbox_image_from_info(&status.info);
        for protected in self.policy.protected_images.iter().chain(&sandbox_image) {
            used.insert(protected.clone());
            used.insert(normalize_reference(protected));
        }
        Ok(self.lock().observe(&listed, &used, now))
    }

    /// ImageFsInfo for the mountpoint, then the filesystem's size and free space.
    fn measure(&self, images: &ImageClient) -> Result<Pressure, ImageGcError> {
        let info = images
            .image_fs_info(&pb::ImageFsInfoRequest::default())
            .map_err(|source| ImageGcError::ImageFsInfo { source })?;
        let mountpoint = info
            .image_filesystems
            .iter()
            .filter_map(|fs| fs.fs_id.as_ref())
            .map(|id| id.mountpoint.clone())
            .find(|m| !m.is_empty())
            .ok_or(ImageGcError::NoImageFs)?;
        let stats =
            (self.fs_stats)(Path::new(&mountpoint)).map_err(|source| ImageGcError::FsStats {
                mountpoint: mountpoint.clone(),
                source,
            })?;
        pressure(stats, &self.policy).ok_or(ImageGcError::InvalidCapacity { mountpoint })
    }

    /// Removes the unused images past `max_age` ([`expired_images`]).
    fn free_expired(
        &self,
        images: &ImageClient,
        in_use: &HashSet<String>,
        now: SystemTime,
        report: &mut ImageGcReport,
    ) {
        let expired: Vec<String> = {
            let records = self.lock();
            expired_images(&records, in_use, &self.policy, now)
                .into_iter()
                .map(|(id, _)| id.to_owned())
                .collect()
        };
        for id in expired {
            log::info!(
                "image gc: removing image {id}: unused for more than {:?} (imageMaximumGCAge)",
                self.policy.max_age
            );
            match self.remove(images, &id) {
                Ok(()) => report.expired.push(id),
                Err(err) => report.errors.push(err),
            }
        }
    }

    /// RemoveImage, and forget the image's record once it is gone.
    fn remove(&self, images: &ImageClient, id: &str) -> Result<(), ImageGcError> {
        let removed = images.remove_image(&pb::RemoveImageRequest {
            image: protobuf::MessageField::some(pb::ImageSpec {
                image: id.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        });
        match removed {
            Ok(_) => {
                self.lock().forget(id);
                Ok(())
            }
            Err(source) => Err(ImageGcError::RemoveImage {
                id: id.to_owned(),
                source,
            }),
        }
    }

    /// Removes images in eviction order until `to_free` bytes are freed.
    fn free(
        &self,
        images: &ImageClient,
        in_use: &HashSet<String>,
        to_free: u64,
        now: SystemTime,
        report: &mut ImageGcReport,
    ) {
        report.wanted_bytes = to_free;
        let order: Vec<(String, u64)> = {
            let records = self.lock();
            eviction_order(&records, in_use, &self.policy, now)
                .into_iter()
                .map(|(id, size)| (id.to_owned(), size))
                .collect()
        };
        for (id, size) in order {
            if report.freed_bytes >= to_free {
                break;
            }
            log::info!("image gc: removing image {id} ({size} bytes)");
            match self.remove(images, &id) {
                Ok(()) => {
                    report.freed_bytes = report.freed_bytes.saturating_add(size);
                    report.removed.push(id);
                }
                Err(err) => report.errors.push(err),
            }
        }
        if report.freed_bytes < to_free {
            report.errors.push(ImageGcError::NotEnoughFreed {
                wanted: to_free,
                freed: report.freed_bytes,
            });
        }
    }
}

#[cfg(test)]
mod tests;
