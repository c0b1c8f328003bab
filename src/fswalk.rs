//! Walking a directory tree that someone else may be changing while litelet, as
//! root, reads or changes it: a pod's volume (the fsGroup ownership change, the
//! disk usage of an emptyDir). A path checked and then used by name can be swapped
//! for a symlink in between (a pod looping `rename` between a file and a link to
//! `/etc/shadow`), so nothing here is looked up by path below the root:
//!
//! - every entry is opened relative to its directory's descriptor with
//!   `O_PATH | O_NOFOLLOW` and `fstat`ed through that descriptor, so what the
//!   visitor is told about is what it acts on (a symlink is opened as the link
//!   itself, never followed);
//! - a directory is read through `openat(<that descriptor>, ".")`, the very inode
//!   just checked, never its name again;
//! - the walk is iterative (a deep tree cannot overflow a pod worker's stack) and
//!   holds one descriptor per level, at most [`Options::max_depth`] levels;
//! - an entry that vanishes between the listing and its open is skipped.
//!
//! Only the root path is resolved by name (its parents are the caller's own
//! directories). No thread of its own; runs on the caller's.

use std::ffi::{CStr, OsStr};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::{Dir, OwningIter};
use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, FileStat, Mode, SFlag};

/// A walk that could not go on, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("open {path}: {source}")]
    Open { path: PathBuf, source: Errno },
    #[error("stat {path}: {source}")]
    Stat { path: PathBuf, source: Errno },
    #[error("read dir {path}: {source}")]
    ReadDir { path: PathBuf, source: Errno },
    #[error("{path}: more than {max} directory levels")]
    TooDeep { path: PathBuf, max: usize },
}

/// How far a walk goes.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Directory levels below the root (one open descriptor each); a deeper one
    /// ends the walk with [`WalkError::TooDeep`].
    pub max_depth: usize,
    /// Stay on the root's file system (`du -x`): entries of another device are
    /// neither reported nor entered.
    pub one_file_system: bool,
}

/// One entry, open.
pub struct Node<'a> {
    /// A directory's descriptor is open for reading; any other entry's is an
    /// `O_PATH` descriptor of the entry itself (a symlink's is the link's).
    pub fd: BorrowedFd<'a>,
    pub stat: &'a FileStat,
    /// Where it was found (for messages only: never used to reach it).
    pub path: &'a Path,
}

impl Node<'_> {
    pub fn is_dir(&self) -> bool {
        kind(self.stat) == SFlag::S_IFDIR
    }

    pub fn is_symlink(&self) -> bool {
        kind(self.stat) == SFlag::S_IFLNK
    }
}

/// What the visitor is told.
pub enum Event<'a> {
    /// A directory, before its entries.
    Enter(Node<'a>),
    /// The same directory, after its entries.
    Leave(Node<'a>),
    /// Anything but a directory: a file, a symlink (not followed), a device node,
    /// a socket or a FIFO.
    Other(Node<'a>),
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Takes ownership of a descriptor nix just returned.
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful openat(2) and nothing else
    // holds it, so this is its only owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `name` in `dir` (the current directory when `None`), opened as itself.
fn open_entry(dir: Option<RawFd>, name: &CStr, path: &Path) -> Result<OwnedFd, WalkError> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    fcntl::openat(dir, name, flags, Mode::empty())
        .map(owned)
        .map_err(|source| WalkError::Open {
            path: path.to_owned(),
            source,
        })
}

/// The directory `entry` refers to, open for reading: `.` below its own
/// descriptor, so the name it was found under is not looked up again.
fn open_dir(entry: &OwnedFd, path: &Path) -> Result<OwningIter, WalkError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    Dir::openat(Some(entry.as_raw_fd()), ".", flags, Mode::empty())
        .map(Dir::into_iter)
        .map_err(|source| WalkError::Open {
            path: path.to_owned(),
            source,
        })
}

fn fstat(fd: &OwnedFd, path: &Path) -> Result<FileStat, WalkError> {
    stat::fstat(fd.as_raw_fd()).map_err(|source| WalkError::Stat {
        path: path.to_owned(),
        source,
    })
}

/// A directory being read.
struct Frame {
    entries: OwningIter,
    stat: FileStat,
}

impl Frame {
    fn node<'a>(&'a self, path: &'a Path) -> Node<'a> {
        // SAFETY: the descriptor belongs to `self.entries`, which outlives the
        // borrow (both are tied to `&'a self`).
        let fd = unsafe { BorrowedFd::borrow_raw(self.entries.as_raw_fd()) };
        Node {
            fd,
            stat: &self.stat,
            path,
        }
    }
}

/// Walks `root` (included) depth first, telling `visit` about each entry; the
/// visitor's `Break` ends the walk early (not an error). Directories are reported
/// before ([`Event::Enter`]) and after ([`Event::Leave`]) their entries.
pub fn walk<E: From<WalkError>>(
    root: &Path,
    options: Options,
    visit: &mut dyn FnMut(Event<'_>) -> Result<ControlFlow<()>, E>,
) -> Result<(), E> {
    let root_name =
        std::ffi::CString::new(root.as_os_str().as_bytes()).map_err(|_| WalkError::Open {
            path: root.to_owned(),
            source: Errno::EINVAL,
        })?;
    let fd = open_entry(None, &root_name, root)?;
    let stat = fstat(&fd, root)?;
    let device = stat.st_dev;
    let mut path = root.to_path_buf();
    let mut stack = Vec::new();
    if let ControlFlow::Break(()) = visit_entry(fd, stat, &path, &mut stack, options, visit)? {
        return Ok(());
    }
    while let Some(frame) = stack.last_mut() {
        let entry = match frame.entries.next() {
            None => {
                let Some(frame) = stack.pop() else { break };
                if let ControlFlow::Break(()) = visit(Event::Leave(frame.node(&path)))? {
                    return Ok(());
                }
                drop(frame);
                path.pop();
                continue;
            }
            Some(Err(source)) => return Err(WalkError::ReadDir { path, source }.into()),
            Some(Ok(entry)) => entry,
        };
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        path.push(OsStr::from_bytes(name.to_bytes()));
        let dir = frame.entries.as_raw_fd();
        let fd = match open_entry(Some(dir), name, &path) {
            Ok(fd) => fd,
            // Removed since the listing: nothing left to visit.
            Err(WalkError::Open {
                source: Errno::ENOENT,
                ..
            }) => {
                path.pop();
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let stat = fstat(&fd, &path)?;
        let pushed = stack.len();
        let flow = if options.one_file_system && stat.st_dev != device {
            ControlFlow::Continue(())
        } else {
            visit_entry(fd, stat, &path, &mut stack, options, visit)?
        };
        if let ControlFlow::Break(()) = flow {
            return Ok(());
        }
        if stack.len() == pushed {
            path.pop();
        }
    }
    Ok(())
}

/// Reports an opened entry; a directory is opened for reading and pushed.
fn visit_entry<E: From<WalkError>>(
    fd: OwnedFd,
    stat: FileStat,
    path: &Path,
    stack: &mut Vec<Frame>,
    options: Options,
    visit: &mut dyn FnMut(Event<'_>) -> Result<ControlFlow<()>, E>,
) -> Result<ControlFlow<()>, E> {
    if kind(&stat) != SFlag::S_IFDIR {
        return visit(Event::Other(Node {
            fd: fd.as_fd(),
            stat: &stat,
            path,
        }));
    }
    if stack.len() > options.max_depth {
        return Err(WalkError::TooDeep {
            path: path.to_owned(),
            max: options.max_depth,
        }
        .into());
    }
    let frame = Frame {
        entries: open_dir(&fd, path)?,
        stat,
    };
    drop(fd);
    let flow = visit(Event::Enter(frame.node(path)))?;
    stack.push(frame);
    Ok(flow)
}

/// For tests of walks under attack: a thread swapping two names in a directory
/// (`renameat2(RENAME_EXCHANGE)`, so both always exist) until dropped.
#[cfg(test)]
pub(crate) mod swapper {
    use std::os::fd::AsRawFd;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;

    use nix::fcntl::{renameat2, RenameFlags};

    pub struct Swapper {
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<u64>>,
    }

    impl Swapper {
        /// Starts exchanging `a` and `b` in `dir`.
        pub fn start(dir: &Path, a: &str, b: &str) -> Swapper {
            let stop = Arc::new(AtomicBool::new(false));
            let dir = std::fs::File::open(dir).unwrap();
            let (a, b) = (a.to_owned(), b.to_owned());
            let thread = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let fd = Some(dir.as_raw_fd());
                    let mut swaps = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if renameat2(fd, a.as_str(), fd, b.as_str(), RenameFlags::RENAME_EXCHANGE)
                            .is_err()
                        {
                            break;
                        }
                        swaps += 1;
                    }
                    swaps
                })
            };
            Swapper {
                stop,
                thread: Some(thread),
            }
        }

        /// Stops and tells how many swaps were made.
        pub fn stop(mut self) -> u64 {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.take().map_or(0, |t| t.join().unwrap())
        }
    }

    impl Drop for Swapper {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::symlink;

    const OPTIONS: Options = Options {
        max_depth: 8,
        one_file_system: false,
    };

    /// Every event as "enter|leave|other <path below root>".
    fn events(root: &Path, options: Options) -> Result<Vec<String>, WalkError> {
        let mut seen = Vec::new();
        walk::<WalkError>(root, options, &mut |event| {
            let (what, node) = match event {
                Event::Enter(n) => ("enter", n),
                Event::Leave(n) => ("leave", n),
                Event::Other(n) => ("other", n),
            };
            let rel = node.path.strip_prefix(root).unwrap().display().to_string();
            seen.push(format!("{what} {rel}"));
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(seen)
    }

    #[test]
    fn every_entry_is_reported_once_and_links_are_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), b"x").unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), b"x").unwrap();
        symlink(tmp.path().join("outside"), root.join("link")).unwrap();
        let mut got = events(&root, OPTIONS).unwrap();
        got.sort();
        assert_eq!(
            got,
            [
                "enter ",
                "enter a",
                "enter a/b",
                "leave ",
                "leave a",
                "leave a/b",
                "other a/b/f",
                "other link"
            ]
        );
    }

    #[test]
    fn a_directory_is_left_after_its_entries() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/f"), b"x").unwrap();
        let got = events(&tmp.path().join("d"), OPTIONS).unwrap();
        assert_eq!(got, ["enter ", "other f", "leave "]);
    }

    #[test]
    fn a_symlinked_root_is_reported_as_the_link() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/f"), b"x").unwrap();
        symlink(tmp.path().join("d"), tmp.path().join("l")).unwrap();
        let got = events(&tmp.path().join("l"), OPTIONS).unwrap();
        assert_eq!(got, ["other "]);
    }

    #[test]
    fn a_tree_deeper_than_the_limit_is_refused_and_a_break_ends_the_walk() {
        let tmp = tempfile::tempdir().unwrap();
        let mut deep = tmp.path().join("root");
        for _ in 0..=OPTIONS.max_depth {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let refused = events(&tmp.path().join("root"), OPTIONS).unwrap_err();
        assert!(
            matches!(refused, WalkError::TooDeep { max: 8, .. }),
            "{refused}"
        );
        let ok = Options {
            max_depth: OPTIONS.max_depth + 1,
            ..OPTIONS
        };
        assert_eq!(events(&tmp.path().join("root"), ok).unwrap().len(), 20);

        let mut count = 0;
        walk::<WalkError>(&tmp.path().join("root"), ok, &mut |_| {
            count += 1;
            Ok(if count == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })
        .unwrap();
        assert_eq!(count, 3);
    }

    #[test]
    fn a_missing_root_is_an_open_error() {
        let tmp = tempfile::tempdir().unwrap();
        let err = events(&tmp.path().join("none"), OPTIONS).unwrap_err();
        assert!(
            matches!(
                err,
                WalkError::Open {
                    source: Errno::ENOENT,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// Under a thread swapping a directory with a symlink to one outside, a walk
    /// reports the directory's own entries or the link itself, never what the link
    /// points to.
    #[test]
    fn a_directory_swapped_with_a_symlink_mid_walk_never_leads_outside() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("d/inside"), b"x").unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), b"x").unwrap();
        symlink(tmp.path().join("outside"), root.join("l")).unwrap();
        let swapper = swapper::Swapper::start(&root, "d", "l");
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..500 {
            for event in events(&root, OPTIONS).unwrap() {
                assert!(!event.ends_with("secret"), "walked outside: {event}");
                *kinds.entry(event).or_default() += 1;
            }
        }
        assert!(swapper.stop() > 0);
        assert!(kinds.keys().any(|k| k.ends_with("/inside")), "{kinds:?}");
    }
}
