//! Reading the manifest folder, and [`Manifests`]: per-file results → one snapshot of
//! static pods plus the error report (the good ones and a list of problems).
//!
//! `--pod-manifest-path` is a folder (every regular file in it whose name does not
//! start with '.', in name order, not recursing, as upstream's `extractFromDir`) or a
//! single manifest file. Symbolic links are followed. Anything that is not a regular
//! file (a FIFO, a socket) is skipped without being opened, so it cannot block the
//! thread.
//!
//! [`read_manifests`] does the I/O; [`Manifests::update`] is pure and holds the only
//! state: the last good pods of each file, kept while that file is bad.
//! Both run on the `static-pods` thread.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::parse::parse_manifest;
use super::{ManifestError, MAX_MANIFEST_BYTES};
use crate::api::pod::Pod;

/// The outcome of one manifest file.
#[derive(Clone, Debug)]
pub struct ManifestFile {
    pub path: PathBuf,
    pub pods: Result<Vec<Pod>, ManifestError>,
}

/// Reads and parses every manifest under `path` for node `node`. Fails only when
/// `path` itself cannot be read (missing: [`io::ErrorKind::NotFound`]); a bad file is
/// an `Err` inside its [`ManifestFile`].
pub fn read_manifests(path: &Path, node: &str) -> io::Result<Vec<ManifestFile>> {
    let meta = fs::metadata(path)?;
    if meta.is_file() {
        return Ok(vec![read_one(path.to_owned(), node)]);
    }
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a folder or a regular file",
        ));
    }
    let mut names = Vec::new();
    for entry in fs::read_dir(path)? {
        let name = entry?.file_name();
        if !name.as_encoded_bytes().starts_with(b".") {
            names.push(name);
        }
    }
    names.sort();
    let mut files = Vec::with_capacity(names.len());
    for name in names {
        let file = path.join(&name);
        match fs::metadata(&file) {
            Ok(m) if m.is_file() => files.push(read_one(file, node)),
            Ok(m) if m.is_dir() => {
                log::debug!("static-pods: not recursing into {}", file.display());
            }
            Ok(_) => log::debug!(
                "static-pods: {} is not a regular file; skipped",
                file.display()
            ),
            // Gone between the listing and now (or a dangling link): not a manifest.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => files.push(ManifestFile {
                pods: Err(read_error(&file, e)),
                path: file,
            }),
        }
    }
    Ok(files)
}

fn read_one(path: PathBuf, node: &str) -> ManifestFile {
    let pods = read_capped(&path)
        .map_err(|e| read_error(&path, e))
        .and_then(|data| parse_manifest(&path, &data, node));
    ManifestFile { path, pods }
}

fn read_capped(path: &Path) -> io::Result<Vec<u8>> {
    let mut data = Vec::new();
    fs::File::open(path)?
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut data)?;
    if data.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        ));
    }
    Ok(data)
}

fn read_error(path: &Path, e: io::Error) -> ManifestError {
    ManifestError::Read {
        path: path.to_owned(),
        source: e.into(),
    }
}

/// Reads `path` once: the static pods it defines now and the problems found. No
/// memory of earlier reads (see [`Manifests`] for that).
pub fn load(path: &Path, node: &str) -> io::Result<(Vec<Pod>, Vec<ManifestError>)> {
    Ok(Manifests::default().update(read_manifests(path, node)?))
}

/// Per-file memory between reads: the pods of each file's last good version.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    good: BTreeMap<PathBuf, Vec<Pod>>,
}

impl Manifests {
    /// Turns the files of one read (in name order) into the snapshot of static pods
    /// and the error report. A bad file contributes the pods of its last good version,
    /// if any; a pod whose namespace/name an earlier file already has is rejected.
    pub fn update(&mut self, files: Vec<ManifestFile>) -> (Vec<Pod>, Vec<ManifestError>) {
        let mut good = BTreeMap::new();
        let mut pods = Vec::new();
        let mut errors = Vec::new();
        let mut owners: HashMap<(String, String), PathBuf> = HashMap::new();
        for file in files {
            let candidates = match file.pods {
                Ok(p) => p,
                Err(e) => {
                    errors.push(e);
                    match self.good.remove(&file.path) {
                        Some(p) => p,
                        None => continue,
                    }
                }
            };
            for pod in &candidates {
                let key = (pod.namespace().to_owned(), pod.name().to_owned());
                if let Some(first) = owners.get(&key) {
                    errors.push(ManifestError::Duplicate {
                        path: file.path.clone(),
                        first: first.clone(),
                        namespace: key.0,
                        name: key.1,
                    });
                    continue;
                }
                owners.insert(key, file.path.clone());
                pods.push(pod.clone());
            }
            good.insert(file.path, candidates);
        }
        self.good = good;
        (pods, errors)
    }

    /// True when `path` currently contributes pods (after the last update); for a file
    /// in the error report, that means its last good version is kept running.
    pub fn has_pods(&self, path: &Path) -> bool {
        self.good.get(path).is_some_and(|p| !p.is_empty())
    }

    /// Forgets every file (the folder is gone).
    pub fn clear(&mut self) {
        self.good.clear();
    }
}
