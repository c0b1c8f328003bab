//! Carries out one container's rotation on the file system (upstream rotateLog and
//! its helpers): stat the live file, decide with [`policy::decide`], remove, compress
//! (`<name>.tmp` then rename to `<name>.gz`, so a crash never leaves a half-written
//! `.gz`), rename the live file and have the runtime reopen it.
//!
//! Runs on a `log-rot-N` worker thread; the reopen is a closure so tests need no
//! runtime. Each step names its file in the error.
//!
//! The log directory may be writable by the pod (a hostPath on `/var/log`), so every
//! step goes through one descriptor of it ([`LogDir`]): nothing is opened through a
//! symlink, the temp file is created with `O_EXCL` (a planted name fails the create
//! instead of truncating its target) and gets its mode with `fchmod`, renames and
//! removals are relative to the descriptor. A rotated copy that is not a regular file
//! is left alone and reported in [`Rotated::Yes::refused`]; a live file that is not one
//! is not rotated at all ([`E::NotRegular`]).

use std::io::{self, ErrorKind};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use flate2::write::GzEncoder;
use flate2::Compression;

use super::policy::{self, Decision, RotatePolicy, COMPRESS_SUFFIX, TMP_SUFFIX};
use super::LogManagerError as E;
use crate::cri::CriError;
use crate::runtime::logs::dir::{is_not_regular, LogDir};

/// What a rotation check did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rotated {
    /// Nothing to do.
    No,
    /// Over the limit, but this second's name is taken; next round.
    Later,
    /// The live file (of `size` bytes) is now `to`; `refused` names the rotated copies
    /// left alone because they are not regular files (symlinks, FIFOs, ...).
    Yes {
        to: String,
        size: u64,
        refused: Vec<String>,
    },
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
    let opened = LogDir::of(path);
    rotate_in(opened, path, policy, now, id, reopen)
}

/// [`rotate_if_needed`] for a log below `root` (the pod logs directory): no folder
/// between `root` and the log may be a symlink either.
pub fn rotate_below(
    root: &Path,
    path: &Path,
    policy: &RotatePolicy,
    now: i64,
    id: &str,
    reopen: &dyn Fn() -> Result<(), CriError>,
) -> Result<Rotated, E> {
    let opened = LogDir::of_below(root, path);
    rotate_in(opened, path, policy, now, id, reopen)
}

fn rotate_in(
    opened: io::Result<(LogDir, &std::ffi::OsStr)>,
    path: &Path,
    policy: &RotatePolicy,
    now: i64,
    id: &str,
    reopen: &dyn Fn() -> Result<(), CriError>,
) -> Result<Rotated, E> {
    let (dir, live) = opened.map_err(|source| E::List {
        path: path.parent().unwrap_or(path).to_owned(),
        source,
    })?;
    let Some(live) = live.to_str() else {
        return Ok(Rotated::No);
    };
    let stat = |dir: &LogDir| {
        dir.regular_len(live).map_err(|source| match source {
            e if is_not_regular(&e) => E::NotRegular {
                path: path.to_owned(),
                source: e,
            },
            source => E::Stat {
                path: path.to_owned(),
                source,
            },
        })
    };
    let size = match stat(&dir) {
        Ok(size) => size,
        // The live file went missing (e.g. removed by hand): have the runtime make it.
        Err(E::Stat { source, .. }) if source.kind() == ErrorKind::NotFound => {
            reopen().map_err(|source| runtime(id, "ReopenContainerLog", source))?;
            stat(&dir)?
        }
        Err(err) => return Err(err),
    };
    if size < policy.max_size {
        return Ok(Rotated::No);
    }
    let siblings = dir.names().map_err(|source| E::List {
        path: dir.path().to_owned(),
        source,
    })?;
    let plan = match policy::decide(policy, live, size, &siblings, now) {
        Decision::UnderLimit => return Ok(Rotated::No),
        Decision::NameTaken(name) => {
            log::debug!("container {id}: {name} exists, rotating next round");
            return Ok(Rotated::Later);
        }
        Decision::Rotate(plan) => plan,
    };
    for name in &plan.remove {
        dir.remove(name).map_err(|source| E::Remove {
            path: dir.join(name),
            source,
        })?;
    }
    let mut refused = Vec::new();
    for name in &plan.compress {
        match compress(&dir, name) {
            Ok(()) => {}
            Err(err) if is_not_regular(&err) => refused.push(name.clone()),
            Err(source) => {
                return Err(E::Compress {
                    path: dir.join(name),
                    source,
                })
            }
        }
    }
    rename(&dir, live, &plan.rotate_to)?;
    if let Err(source) = reopen() {
        // Put it back so the runtime keeps writing to the live name and the next
        // round tries again.
        if let Err(err) = rename(&dir, &plan.rotate_to, live) {
            log::error!("container {id}: {err}; its output now goes to the rotated file");
        }
        return Err(runtime(id, "ReopenContainerLog", source));
    }
    Ok(Rotated::Yes {
        to: plan.rotate_to,
        size,
        refused,
    })
}

fn runtime(id: &str, step: &'static str, source: CriError) -> E {
    E::Runtime {
        id: id.to_owned(),
        step,
        source,
    }
}

fn rename(dir: &LogDir, from: &str, to: &str) -> Result<(), E> {
    dir.rename(from, to).map_err(|source| E::Rename {
        from: dir.join(from),
        to: dir.join(to),
        source,
    })
}

/// Gzips `name` into `name.gz` through `name.tmp`, then removes `name`. Fails with a
/// [`crate::runtime::logs::dir::NotRegular`] error, touching nothing, when `name` is
/// not a regular file.
pub fn compress(dir: &LogDir, name: &str) -> io::Result<()> {
    let (tmp, gz) = (
        format!("{name}{TMP_SUFFIX}"),
        format!("{name}{COMPRESS_SUFFIX}"),
    );
    let mut src = dir.open_regular(name)?;
    let mode = src.metadata()?.permissions().mode();
    // A leftover of a crash, or a name planted by the pod: the link itself goes, and
    // the exclusive create below fails if one is planted again in between.
    dir.remove(&tmp)?;
    let result = (|| {
        let out = dir.create_new(&tmp, mode)?;
        let mut encoder = GzEncoder::new(out, Compression::default());
        io::copy(&mut src, &mut encoder)?;
        encoder.finish()?.sync_all()?;
        dir.rename(&tmp, &gz)
    })();
    if result.is_err() {
        let _ = dir.remove(&tmp);
    }
    result?;
    dir.remove(name)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::fs::{self, File};
    use std::io::Read;

    use super::*;

    fn policy() -> RotatePolicy {
        RotatePolicy {
            max_size: 10,
            max_files: 3,
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v = LogDir::open(dir).unwrap().names().unwrap();
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
