//! One container log directory opened once, and every file in it reached relative to
//! that descriptor (`openat`, `renameat`, `unlinkat`, `fstatat`), never through a
//! path that is resolved again.
//!
//! Why: a pod that can write its own log folder (a hostPath on `/var/log`) can put
//! anything next to its log, such as `0.log.x -> /etc/shadow`, a FIFO, or a temp name
//! pointing at a host file, and change it between our checks. So nothing here follows
//! a symlink in the last component (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`), new files are
//! made with `O_EXCL`, modes are set on the descriptor, and a file is used only when
//! `fstat` on the open descriptor says it is a regular file with a single name
//! (anything else, a hard link to a host file included, is refused with
//! [`NotRegular`]). Opens add `O_NONBLOCK` so a FIFO cannot hang the caller
//! before it is refused.
//!
//! Used by the log reader beside it (server connection threads, termination messages)
//! and by the rotation in `src/logs/` (`log-rot-N` threads). No state beyond the
//! descriptor; no locks.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, FileStat, Mode, SFlag};
use nix::unistd::{self, UnlinkatFlags};

/// A file that is not a regular one (a symlink, FIFO, device, socket or directory),
/// or a regular one with another hard link, where a log file was expected; it is
/// neither read nor written.
#[derive(Debug, thiserror::Error)]
#[error("refusing {path}: it is a {kind}")]
pub struct NotRegular {
    pub path: PathBuf,
    pub kind: &'static str,
}

impl From<NotRegular> for io::Error {
    fn from(e: NotRegular) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

/// True when `err` is a refused non-regular file ([`NotRegular`]).
pub fn is_not_regular(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|e| e.is::<NotRegular>())
}

fn kind_of(mode: u32) -> &'static str {
    match SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFLNK => "symlink",
        SFlag::S_IFDIR => "directory",
        SFlag::S_IFIFO => "fifo",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        SFlag::S_IFSOCK => "socket",
        _ => "special file",
    }
}

fn is_regular(st: &FileStat) -> bool {
    st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits()
}

/// What is wrong with a file where a log file is expected, if anything: not a
/// regular file, or one with more than one name. A hard link lets a pod that writes
/// its log folder give a host file a name there, as a symlink would (and `link(2)`
/// needs no access to the file's content).
fn refusal(st: &FileStat) -> Option<&'static str> {
    if !is_regular(st) {
        Some(kind_of(st.st_mode))
    } else if st.st_nlink > 1 {
        Some("regular file with more than one hard link")
    } else {
        None
    }
}

/// Takes ownership of a descriptor nix just returned.
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open(2)-family call and nothing
    // else holds it, so this is its only owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A file's directory (`.` when it has none) and name.
fn split(file: &Path) -> io::Result<(&Path, &OsStr)> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, "log path has no file name");
    let name = file.file_name().ok_or_else(bad)?;
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// An open container log directory.
#[derive(Debug)]
pub struct LogDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl LogDir {
    /// Opens `dir`; fails when its last component is a symlink or not a directory.
    pub fn open(dir: &Path) -> io::Result<LogDir> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = fcntl::open(dir, flags, Mode::empty()).map_err(|e| match e {
            // A symlink (or a file) where the directory should be.
            Errno::ELOOP | Errno::ENOTDIR => match stat::lstat(dir) {
                Ok(st) => NotRegular {
                    path: dir.to_owned(),
                    kind: kind_of(st.st_mode),
                }
                .into(),
                Err(_) => io::Error::from(e),
            },
            other => io::Error::from(other),
        })?;
        Ok(LogDir {
            fd: owned(fd),
            path: dir.to_owned(),
        })
    }

    /// Opens `dir` when it lies below `root`: `root` is resolved as usual (the node's
    /// own layout may use symlinks, e.g. `/var/log` on another disk), and from there
    /// each folder (the pod's, the container's) is opened without following a
    /// symlink, since a pod may own them. A `dir` outside `root` is opened as by
    /// [`LogDir::open`].
    pub fn open_below(root: &Path, dir: &Path) -> io::Result<LogDir> {
        let Ok(rel) = dir.strip_prefix(root) else {
            return LogDir::open(dir);
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut fd = owned(fcntl::open(root, flags, Mode::empty())?);
        let mut path = root.to_owned();
        for part in rel.components() {
            let std::path::Component::Normal(name) = part else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not plainly below {}", dir.display(), root.display()),
                ));
            };
            path.push(name);
            let next = fcntl::openat(
                Some(fd.as_raw_fd()),
                name,
                flags | OFlag::O_NOFOLLOW,
                Mode::empty(),
            );
            fd = match next {
                Ok(next) => owned(next),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    let st = stat::fstatat(
                        Some(fd.as_raw_fd()),
                        name,
                        fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                    )?;
                    return Err(NotRegular {
                        path,
                        kind: kind_of(st.st_mode),
                    }
                    .into());
                }
                Err(e) => return Err(e.into()),
            };
        }
        Ok(LogDir { fd, path })
    }

    /// Opens the directory of `file` and returns it with the file's name.
    pub fn of(file: &Path) -> io::Result<(LogDir, &OsStr)> {
        let (dir, name) = split(file)?;
        Ok((LogDir::open(dir)?, name))
    }

    /// [`LogDir::of`] with the directory opened by [`LogDir::open_below`] `root`.
    pub fn of_below<'a>(root: &Path, file: &'a Path) -> io::Result<(LogDir, &'a OsStr)> {
        let (dir, name) = split(file)?;
        Ok((LogDir::open_below(root, dir)?, name))
    }

    /// The directory's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` joined onto the directory (for messages).
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    fn raw(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// The UTF-8 names in the directory (others are not logs litelet knows).
    pub fn names(&self) -> io::Result<Vec<String>> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut dir = Dir::openat(self.raw(), ".", flags, Mode::empty())?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    /// `lstat` of `name` in the directory (a symlink is reported as one).
    pub fn stat(&self, name: impl AsRef<OsStr>) -> io::Result<FileStat> {
        let name = Path::new(name.as_ref());
        Ok(stat::fstatat(
            self.raw(),
            name,
            fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )?)
    }

    /// The length of `name`, which must be a regular file (a symlink is refused, not
    /// followed).
    pub fn regular_len(&self, name: impl AsRef<OsStr>) -> io::Result<u64> {
        let name = Path::new(name.as_ref());
        let st = self.stat(name)?;
        if let Some(kind) = refusal(&st) {
            return Err(self.refuse(name, kind));
        }
        Ok(u64::try_from(st.st_size).unwrap_or(0))
    }

    fn refuse(&self, name: &Path, kind: &'static str) -> io::Error {
        NotRegular {
            path: self.join(name),
            kind,
        }
        .into()
    }

    /// Opens `name` for reading if, and only if, it is a regular file with no other
    /// name (hard link).
    pub fn open_regular(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        let name = Path::new(name.as_ref());
        // A first look by name, so a device or FIFO is not even opened.
        let seen = self.stat(name)?;
        if let Some(kind) = refusal(&seen) {
            return Err(self.refuse(name, kind));
        }
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = fcntl::openat(self.raw(), name, flags, Mode::empty()).map_err(|e| match e {
            // Swapped for a symlink since the look above.
            Errno::ELOOP => self.refuse(name, "symlink"),
            other => io::Error::from(other),
        })?;
        let fd = owned(fd);
        // What was opened is what counts: the name may have been swapped in between.
        let st = stat::fstat(fd.as_raw_fd())?;
        if let Some(kind) = refusal(&st) {
            return Err(self.refuse(name, kind));
        }
        Ok(File::from(fd))
    }

    /// Creates `name` for writing with `mode` (permission bits); fails when anything,
    /// a symlink included, already has that name.
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let name = Path::new(name.as_ref());
        let flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_EXCL
            | OFlag::O_NOFOLLOW
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = owned(fcntl::openat(
            self.raw(),
            name,
            flags,
            Mode::from_bits_truncate(0o600),
        )?);
        // On the descriptor, and after the create, so the umask does not decide.
        stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(mode & 0o777))?;
        Ok(File::from(fd))
    }

    /// Renames `from` to `to`, both in this directory (a symlink is renamed as a link).
    pub fn rename(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> io::Result<()> {
        let (from, to) = (Path::new(from.as_ref()), Path::new(to.as_ref()));
        Ok(fcntl::renameat(self.raw(), from, self.raw(), to)?)
    }

    /// Removes `name` (a symlink itself, never its target); a missing one is fine.
    pub fn remove(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = Path::new(name.as_ref());
        match unistd::unlinkat(self.raw(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::fs::{symlink, PermissionsExt};

    use super::*;

    #[test]
    fn symlinks_fifos_and_directories_are_refused_regular_files_read() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("secret");
        std::fs::write(&target, b"host secret").unwrap();
        let logs = tmp.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::fs::write(logs.join("0.log"), b"line\n").unwrap();
        symlink(&target, logs.join("0.log.1")).unwrap();
        symlink("/dev/zero", logs.join("zero")).unwrap();
        nix::unistd::mkfifo(&logs.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::create_dir(logs.join("sub")).unwrap();
        let dir = LogDir::open(&logs).unwrap();
        let mut text = String::new();
        dir.open_regular("0.log")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "line\n");
        for (name, kind) in [
            ("0.log.1", "symlink"),
            ("zero", "symlink"),
            ("fifo", "fifo"),
            ("sub", "directory"),
        ] {
            let err = dir.open_regular(name).unwrap_err();
            assert!(is_not_regular(&err), "{name}: {err}");
            assert!(err.to_string().contains(kind), "{name}: {err}");
        }
        let mut names = dir.names().unwrap();
        names.sort();
        assert_eq!(names, ["0.log", "0.log.1", "fifo", "sub", "zero"]);
    }

    /// A hard link is a second name of a host file the pod can reach: it is refused
    /// like a symlink, by name and through an open, and so is the file's other name.
    #[test]
    fn hard_linked_log_files_are_refused_like_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let host = logs.join("host-file");
        std::fs::write(&host, b"host secret").unwrap();
        std::fs::hard_link(&host, logs.join("0.log")).unwrap();
        let dir = LogDir::open(&logs).unwrap();
        for name in ["0.log", "host-file"] {
            let err = dir.open_regular(name).unwrap_err();
            assert!(is_not_regular(&err), "{name}: {err}");
            assert!(err.to_string().contains("hard link"), "{name}: {err}");
            let err = dir.regular_len(name).unwrap_err();
            assert!(is_not_regular(&err), "{name}: {err}");
        }
        // Once the other name is gone it is an ordinary log again.
        dir.remove("host-file").unwrap();
        assert_eq!(dir.regular_len("0.log").unwrap(), 11);
        assert!(dir.open_regular("0.log").is_ok());
    }

    #[test]
    fn create_new_never_writes_through_an_existing_name() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("victim");
        std::fs::write(&target, b"keep me").unwrap();
        let logs = tmp.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        symlink(&target, logs.join("x.tmp")).unwrap();
        let dir = LogDir::open(&logs).unwrap();
        assert!(dir.create_new("x.tmp", 0o640).is_err());
        dir.remove("x.tmp").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        let mut f = dir.create_new("x.tmp", 0o640).unwrap();
        f.write_all(b"new").unwrap();
        let mode = std::fs::metadata(logs.join("x.tmp"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        dir.rename("x.tmp", "x.gz").unwrap();
        assert_eq!(std::fs::read(logs.join("x.gz")).unwrap(), b"new");
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        symlink(tmp.path(), tmp.path().join("link")).unwrap();
        let err = LogDir::open(&tmp.path().join("link")).unwrap_err();
        assert!(is_not_regular(&err), "{err}");
    }

    #[test]
    fn below_the_root_no_folder_may_be_a_symlink_but_the_root_may() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real-logs");
        std::fs::create_dir_all(real.join("ns_p_u/c")).unwrap();
        std::fs::create_dir_all(tmp.path().join("elsewhere/c")).unwrap();
        symlink(&real, tmp.path().join("logs")).unwrap();
        let root = tmp.path().join("logs");
        let dir = LogDir::open_below(&root, &root.join("ns_p_u/c")).unwrap();
        assert_eq!(dir.path(), root.join("ns_p_u/c"));
        // The pod swaps its folder for a link elsewhere.
        symlink(tmp.path().join("elsewhere"), real.join("ns_q_u")).unwrap();
        let err = LogDir::open_below(&root, &root.join("ns_q_u/c")).unwrap_err();
        assert!(is_not_regular(&err), "{err}");
        assert!(err.to_string().contains("ns_q_u: it is a symlink"), "{err}");
        let err = LogDir::open_below(&root, &root.join("ns_p_u/../ns_q_u/c")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
