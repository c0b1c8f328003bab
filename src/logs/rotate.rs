//! Carries out one container's rotation on the file system (upstream rotateLog and
//! its helpers): stat the live file, decide with [`policy::decide`], remove, compress
//! (`<name>.tmp` then rename to `<name>.gz`, so a crash never leaves a half-written
//! `.gz`), rename the live file and have the runtime reopen it.
//!
//! Runs on a `log-rot-N` worker thread; the reopen is a closure so tests need no
//! runtime. Each step names its file in the error.

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;

use super::policy::{self, Decision, RotatePolicy, COMPRESS_SUFFIX, TMP_SUFFIX};
use super::LogManagerError as E;
use crate::cri::CriError;

/// What a rotation check did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rotated {
    /// Nothing to do.
    No,
    /// Over the limit, but this second's name is taken; next round.
    Later,
    /// The live file (of `size` bytes) is now `to`.
    Yes { to: String, size: u64 },
}

/// Rotates the log at `path` when `policy` says so. `reopen` asks the runtime to
/// reopen the container's log; `now` is unix seconds.
pub fn rotate_if_needed(
    path: &Path,
    policy: &RotatePolicy,
    now: i64,
    id: &str,
    reopen: &dyn Fn() -> Result<(), CriError>,
) -> Result<Rotated, E> {
    let stat = |path: &Path| {
        fs::metadata(path).map_err(|source| E::Stat {
            path: path.to_owned(),
            source,
        })
    };
    let size = match fs::metadata(path) {
        Ok(meta) => meta.len(),
        // The live file went missing (e.g. removed by hand): have the runtime make it.
        Err(err) if err.kind() == ErrorKind::NotFound => {
            reopen().map_err(|source| runtime(id, "ReopenContainerLog", source))?;
            stat(path)?.len()
        }
        Err(source) => {
            return Err(E::Stat {
                path: path.to_owned(),
                source,
            })
        }
    };
    if size < policy.max_size {
        return Ok(Rotated::No);
    }
    let (Some(dir), Some(live)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Ok(Rotated::No);
    };
    let siblings = list(dir)?;
    let plan = match policy::decide(policy, live, size, &siblings, now) {
        Decision::UnderLimit => return Ok(Rotated::No),
        Decision::NameTaken(name) => {
            log::debug!("container {id}: {name} exists, rotating next round");
            return Ok(Rotated::Later);
        }
        Decision::Rotate(plan) => plan,
    };
    for name in &plan.remove {
        remove(&dir.join(name))?;
    }
    for name in &plan.compress {
        let file = dir.join(name);
        compress(&file).map_err(|source| E::Compress { path: file, source })?;
    }
    let rotated = dir.join(&plan.rotate_to);
    rename(path, &rotated)?;
    if let Err(source) = reopen() {
        // Put it back so the runtime keeps writing to the live name and the next
        // round tries again.
        if let Err(err) = rename(&rotated, path) {
            log::error!("container {id}: {err}; its output now goes to the rotated file");
        }
        return Err(runtime(id, "ReopenContainerLog", source));
    }
    Ok(Rotated::Yes {
        to: plan.rotate_to,
        size,
    })
}

fn runtime(id: &str, step: &'static str, source: CriError) -> E {
    E::Runtime {
        id: id.to_owned(),
        step,
        source,
    }
}

/// The file names in `dir`.
fn list(dir: &Path) -> Result<Vec<String>, E> {
    let entries = fs::read_dir(dir).map_err(|source| E::List {
        path: dir.to_owned(),
        source,
    })?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

fn remove(path: &Path) -> Result<(), E> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != ErrorKind::NotFound => Err(E::Remove {
            path: path.to_owned(),
            source: err,
        }),
        _ => Ok(()),
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), E> {
    fs::rename(from, to).map_err(|source| E::Rename {
        from: from.to_owned(),
        to: to.to_owned(),
        source,
    })
}

/// Gzips `file` into `file.gz` through `file.tmp`, then removes `file`.
pub fn compress(file: &Path) -> io::Result<()> {
    let with = |suffix: &str| {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let (tmp, gz) = (with(TMP_SUFFIX), with(COMPRESS_SUFFIX));
    let result = (|| {
        let mut src = File::open(file)?;
        let mode = src.metadata()?.permissions().mode();
        let out = File::create(&tmp)?;
        out.set_permissions(fs::Permissions::from_mode(mode))?;
        let mut encoder = GzEncoder::new(out, Compression::default());
        io::copy(&mut src, &mut encoder)?;
        encoder.finish()?.sync_all()?;
        fs::rename(&tmp, &gz)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    fs::remove_file(file)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::io::Read;

    use super::*;

    fn policy() -> RotatePolicy {
        RotatePolicy {
            max_size: 10,
            max_files: 3,
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v = list(dir).unwrap();
        v.sort();
        v
    }

    #[test]
    fn rotates_compresses_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        let reopened = Cell::new(0);
        let reopen = || {
            reopened.set(reopened.get() + 1);
            fs::write(&live, b"").map_err(|e| CriError::Unavailable {
                op: "reopen",
                message: e.to_string(),
            })
        };
        for (i, body) in ["first-line\n", "second-line\n", "third-line\n"]
            .iter()
            .enumerate()
        {
            fs::write(&live, body).unwrap();
            let got = rotate_if_needed(&live, &policy(), 100 + i as i64, "c1", &reopen).unwrap();
            assert!(matches!(got, Rotated::Yes { .. }), "{got:?}");
        }
        assert_eq!(reopened.get(), 3);
        // Three files at most: live, the newest copy plain, one older gzipped.
        assert_eq!(
            names(dir.path()),
            ["0.log", "0.log.19700101-000141.gz", "0.log.19700101-000142"]
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(
            File::open(dir.path().join("0.log.19700101-000141.gz")).unwrap(),
        )
        .read_to_string(&mut text)
        .unwrap();
        assert_eq!(text, "second-line\n");
        assert_eq!(
            rotate_if_needed(&live, &policy(), 200, "c1", &reopen).unwrap(),
            Rotated::No,
            "the fresh live file is empty"
        );
    }

    #[test]
    fn a_failed_reopen_puts_the_file_back() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        fs::write(&live, b"more than ten bytes\n").unwrap();
        let fail = || {
            Err(CriError::Unavailable {
                op: "reopen",
                message: "down".into(),
            })
        };
        let err = rotate_if_needed(&live, &policy(), 100, "c1", &fail).unwrap_err();
        assert!(err.to_string().contains("ReopenContainerLog"), "{err}");
        assert_eq!(names(dir.path()), ["0.log"]);
        assert_eq!(fs::read(&live).unwrap(), b"more than ten bytes\n");
    }

    #[test]
    fn same_second_waits_and_keeps_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        fs::write(dir.path().join("0.log.19700101-000140"), b"older\n").unwrap();
        fs::write(&live, b"more than ten bytes\n").unwrap();
        let ok = || Ok(());
        assert_eq!(
            rotate_if_needed(&live, &policy(), 100, "c1", &ok).unwrap(),
            Rotated::Later
        );
        assert_eq!(
            fs::read(dir.path().join("0.log.19700101-000140")).unwrap(),
            b"older\n"
        );
    }
}
