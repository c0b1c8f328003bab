//! Reading container logs in the CRI format the runtime writes: one line per record,
//! `<RFC3339Nano time> <stdout|stderr> <P|F> <content>`, where `P` marks a partial
//! record continued by the next line and `F` a full one (its newline restored on
//! output). Options are upstream's `PodLogOptions`: tailLines, sinceSeconds/sinceTime,
//! timestamps, limitBytes; follow is driven by the route, which calls
//! [`LogReader::pump`] until the container stops or the client leaves.
//!
//! Pure parsing ([`parse_line`], [`render`]) plus a thin file reader (upstream
//! `kuberuntime/logs`). Called on the server's connection threads (`kubectl logs`) and
//! by the runtime's termination messages (`FallbackToLogsOnError`); each reader owns its file handles. Malformed lines are skipped
//! (logged at debug), never fatal.
//!
//! Rotation (`logs::manager` renames `0.log` to `0.log.<ts>` and the runtime starts a
//! new `0.log`): a follower reads the old file to its end before it moves to the new
//! one, so no line is lost or repeated; a truncated file is read again from its start.
//! A `tailLines` larger than the live file takes the rest from the newest rotated copy
//! (the plain one), so the tail right after a rotation is still the last N lines
//! (upstream reads the live file only and returns fewer).
//!
//! Bounds: files are opened relative to their directory without following symlinks
//! and only when they are regular files ([`dir`]), so a log swapped for a link to
//! `/dev/zero` or a host file is refused, not streamed. Without follow a reader stops
//! at the length each file had when it was opened; with follow it stops at the
//! deadline its caller sets ([`LogReader::set_deadline`]), checked after every chunk,
//! so no single [`LogReader::pump`] call runs unbounded.

pub mod dir;
pub mod policy;

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use dir::LogDir;

use crate::api::meta::{parse_rfc3339_nanos, TimeParseError};

/// The longest line kept in memory while waiting for its end; longer ones are cut.
const MAX_LINE: usize = 1024 * 1024;

/// Which lines and how.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Only the last N lines (records, partial ones counted separately as upstream).
    pub tail_lines: Option<u64>,
    /// Only records at or after this time (unix nanoseconds).
    pub since_nanos: Option<i128>,
    /// Prefix each record with its timestamp.
    pub timestamps: bool,
    /// Stop after this many bytes of output.
    pub limit_bytes: Option<u64>,
    pub follow: bool,
}

/// One record of a CRI log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    pub timestamp: &'a str,
    pub nanos: i128,
    pub stream: &'a str,
    pub partial: bool,
    pub content: &'a [u8],
}

/// A line that is not in the CRI log format.
#[derive(Debug, thiserror::Error)]
pub enum LogLineError {
    #[error("empty line")]
    Empty,
    #[error("missing stream")]
    MissingStream,
    #[error("missing tag")]
    MissingTag,
    #[error("timestamp is not UTF-8")]
    TimestampUtf8,
    #[error(transparent)]
    Timestamp(#[from] TimeParseError),
    #[error("unknown stream {0:?}")]
    UnknownStream(String),
}

/// Parses one line (without its `\n`).
pub fn parse_line(line: &[u8]) -> Result<LogLine<'_>, LogLineError> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let ts = parts.next().ok_or(LogLineError::Empty)?;
    let stream = parts.next().ok_or(LogLineError::MissingStream)?;
    let tag = parts.next().ok_or(LogLineError::MissingTag)?;
    let content = parts.next().unwrap_or(b"");
    let timestamp = std::str::from_utf8(ts).map_err(|_| LogLineError::TimestampUtf8)?;
    let nanos = parse_rfc3339_nanos(timestamp)?;
    let stream = match stream {
        b"stdout" => "stdout",
        b"stderr" => "stderr",
        other => {
            return Err(LogLineError::UnknownStream(
                String::from_utf8_lossy(other).into_owned(),
            ))
        }
    };
    // Old runtimes wrote no tag: the rest of the line is content.
    let (partial, content) = match tag {
        b"P" => (true, content),
        b"F" => (false, content),
        _ => {
            let start = ts.len() + 1 + stream.len() + 1;
            (false, &line[start.min(line.len())..])
        }
    };
    Ok(LogLine {
        timestamp,
        nanos,
        stream,
        partial,
        content,
    })
}

/// The bytes a client sees for one record.
pub fn render(line: &LogLine<'_>, timestamps: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.content.len() + 40);
    if timestamps {
        out.extend_from_slice(line.timestamp.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(line.content);
    if !line.partial {
        out.push(b'\n');
    }
    out
}

/// The offset where the last `n` lines of `file` start (upstream
/// FindTailLineStartIndex); reads backwards in blocks.
pub fn tail_start(file: &mut File, n: u64) -> io::Result<u64> {
    Ok(tail_lines_start(file, n)?.0)
}

/// [`tail_start`] and how many lines start there (fewer than `n` when the file
/// is shorter).
pub fn tail_lines_start(file: &mut File, n: u64) -> io::Result<(u64, u64)> {
    let len = file.metadata()?.len();
    if n == 0 {
        return Ok((len, 0));
    }
    let mut pos = len;
    let mut newlines = 0u64;
    let mut block = vec![0u8; 8192];
    // A final newline ends the last line; it does not start a new one.
    let mut skip_last = true;
    while pos > 0 {
        let size = pos.min(block.len() as u64) as usize;
        pos -= size as u64;
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut block[..size])?;
        for i in (0..size).rev() {
            if block[i] != b'\n' {
                skip_last = false;
                continue;
            }
            if skip_last {
                skip_last = false;
                continue;
            }
            newlines += 1;
            if newlines == n {
                return Ok((pos + i as u64 + 1, n));
            }
        }
    }
    Ok((0, newlines + u64::from(len > 0)))
}

/// The name of the newest rotated copy of the live file `live` when it is plain (not
/// yet gzipped).
fn newest_rotated(dir: &LogDir, live: &OsString) -> Option<String> {
    let live = live.to_str()?;
    let names = dir.names().ok()?;
    let newest = policy::rotated_in_use(live, &names).pop()?;
    (!newest.ends_with(policy::COMPRESS_SUFFIX)).then_some(newest)
}

/// Why a pump stopped writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pumped {
    /// Everything currently in the file was sent (`true` when anything was).
    CaughtUp(bool),
    /// `limitBytes` was reached.
    LimitReached,
    /// The deadline set with [`LogReader::set_deadline`] passed.
    TimeUp,
}

/// Reads a CRI log file from an offset, applying the options.
pub struct LogReader {
    path: PathBuf,
    /// The live file's directory and name: rotation checks look there again.
    dir: LogDir,
    name: OsString,
    /// The file being read: the live one, or a rotated copy read before it.
    file: File,
    /// Where reading `file` stops (its length at open) unless following.
    end: Option<u64>,
    /// The live file, when `file` is a rotated copy read first for the tail, and its
    /// `end`.
    next: Option<(File, Option<u64>)>,
    /// The inode of the live file last opened at `path`.
    inode: u64,
    /// Offset in `file`.
    pos: u64,
    pending: Vec<u8>,
    remaining: Option<u64>,
    options: LogOptions,
    deadline: Option<Instant>,
}

impl LogReader {
    /// Opens `path` at the start of the tail the options ask for.
    /// Fails with [`dir::NotRegular`] (as an `InvalidInput` error) when the file is a
    /// symlink, FIFO, device or anything else than a regular file.
    pub fn open(path: &Path, options: LogOptions) -> io::Result<LogReader> {
        let (dir, name) = LogDir::of(path)?;
        Self::open_in(path, dir, name.to_owned(), options)
    }

    /// [`LogReader::open`] for a file below `root` (the pod logs directory): no folder
    /// between `root` and the file may be a symlink either ([`LogDir::open_below`]).
    pub fn open_below(root: &Path, path: &Path, options: LogOptions) -> io::Result<LogReader> {
        let (dir, name) = LogDir::of_below(root, path)?;
        Self::open_in(path, dir, name.to_owned(), options)
    }

    fn open_in(
        path: &Path,
        dir: LogDir,
        name: OsString,
        options: LogOptions,
    ) -> io::Result<LogReader> {
        let mut file = dir.open_regular(&name)?;
        let meta = file.metadata()?;
        let inode = meta.ino();
        let end_at = |len: u64| (!options.follow).then_some(len);
        let mut end = end_at(meta.len());
        let mut next = None;
        let mut pos = 0;
        if let Some(n) = options.tail_lines {
            let (start, found) = tail_lines_start(&mut file, n)?;
            pos = start;
            let older = (found < n)
                .then(|| newest_rotated(&dir, &name))
                .flatten()
                .and_then(|older| dir.open_regular(older).ok());
            if let Some(mut older) = older {
                let older_pos = tail_start(&mut older, n - found)?;
                let older_end = end_at(older.metadata()?.len());
                file.seek(SeekFrom::Start(0))?;
                next = Some((std::mem::replace(&mut file, older), end));
                end = older_end;
                pos = older_pos;
            }
        }
        file.seek(SeekFrom::Start(pos))?;
        Ok(LogReader {
            path: path.to_owned(),
            dir,
            name,
            file,
            end,
            next,
            inode,
            pos,
            pending: Vec::new(),
            remaining: options.limit_bytes,
            options,
            deadline: None,
        })
    }

    /// Makes every later [`LogReader::pump`] return [`Pumped::TimeUp`] once `at` has
    /// passed, even while the file keeps growing.
    pub fn set_deadline(&mut self, at: Instant) {
        self.deadline = Some(at);
    }

    fn time_up(&self) -> bool {
        self.deadline.is_some_and(|at| Instant::now() >= at)
    }

    /// Sends every complete line now in the file to `out`.
    pub fn pump(&mut self, out: &mut dyn Write) -> io::Result<Pumped> {
        let mut sent = false;
        let mut chunk = vec![0u8; 32 * 1024];
        loop {
            if self.time_up() {
                out.flush()?;
                return Ok(Pumped::TimeUp);
            }
            let want = match self.end {
                Some(end) => end.saturating_sub(self.pos).min(chunk.len() as u64) as usize,
                None => chunk.len(),
            };
            let n = match want {
                0 => 0,
                want => self.file.read(&mut chunk[..want])?,
            };
            if n == 0 {
                // Only at the end of a file: the old one is read out before moving on.
                if let Some((live, end)) = self.next.take() {
                    self.file = live;
                    self.end = end;
                    self.pos = 0;
                    continue;
                }
                if self.options.follow && self.check_rotation()? {
                    continue;
                }
                return Ok(Pumped::CaughtUp(sent));
            }
            self.pos += n as u64;
            self.pending.extend_from_slice(&chunk[..n]);
            let mut start = 0;
            while let Some(end) = self.pending[start..].iter().position(|b| *b == b'\n') {
                let line = &self.pending[start..start + end];
                start += end + 1;
                let bytes = match parse_line(line) {
                    Ok(rec) if self.options.since_nanos.is_none_or(|s| rec.nanos >= s) => {
                        render(&rec, self.options.timestamps)
                    }
                    Ok(_) => continue,
                    Err(err) => {
                        log::debug!(
                            "{}: skipping a malformed log line: {err}",
                            self.path.display()
                        );
                        continue;
                    }
                };
                if self.write_limited(out, &bytes)? {
                    out.flush()?;
                    return Ok(Pumped::LimitReached);
                }
                sent = true;
            }
            self.pending.drain(..start);
            if self.pending.len() > MAX_LINE {
                self.pending.clear();
            }
            if sent {
                out.flush()?;
            }
        }
    }

    /// Writes within `limitBytes`; true when the limit is now reached.
    fn write_limited(&mut self, out: &mut dyn Write, bytes: &[u8]) -> io::Result<bool> {
        match &mut self.remaining {
            None => {
                out.write_all(bytes)?;
                Ok(false)
            }
            Some(left) => {
                let n = (*left).min(bytes.len() as u64) as usize;
                out.write_all(&bytes[..n])?;
                *left -= n as u64;
                Ok(*left == 0)
            }
        }
    }

    /// At the end of the live file: moves to a new file at the path (rotated) or back
    /// to the start (truncated); true when it did.
    fn check_rotation(&mut self) -> io::Result<bool> {
        // Between the rename and the runtime's reopen there is no file: keep waiting.
        let Ok(meta) = self.dir.stat(&self.name) else {
            return Ok(false);
        };
        if meta.st_ino != self.inode {
            // Refused (an error ends the stream) if the new file is not a regular one.
            let file = self.dir.open_regular(&self.name)?;
            self.inode = file.metadata()?.ino();
            self.file = file;
            self.pos = 0;
            return Ok(true);
        }
        if (meta.st_size as u64) < self.pos {
            self.file.seek(SeekFrom::Start(0))?;
            self.pos = 0;
            self.pending.clear();
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2024-01-01T00:00:01.000000001Z stdout F one\n\
2024-01-01T00:00:02Z stderr P two-\n\
2024-01-01T00:00:02.5+00:00 stderr F a\n\
garbage\n\
2024-01-01T00:00:03Z stdout F three\n";

    fn read_all(options: LogOptions) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, LOG).unwrap();
        let mut reader = LogReader::open(&path, options).unwrap();
        let mut out = Vec::new();
        reader.pump(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn parses_cri_lines() {
        let l = parse_line(b"2024-01-01T00:00:02Z stderr P two-").unwrap();
        assert_eq!(l.stream, "stderr");
        assert!(l.partial);
        assert_eq!(l.content, b"two-");
        assert_eq!(l.nanos, 1_704_067_202_000_000_000);
        assert!(parse_line(b"garbage").is_err());
        assert!(parse_line(b"2024-01-01T00:00:02Z stdin F x").is_err());
        let empty = parse_line(b"2024-01-01T00:00:02Z stdout F").unwrap();
        assert_eq!(empty.content, b"");
    }

    #[test]
    fn options_shape_the_output() {
        assert_eq!(read_all(LogOptions::default()), "one\ntwo-a\nthree\n");
        let ts = read_all(LogOptions {
            timestamps: true,
            ..Default::default()
        });
        assert!(
            ts.starts_with("2024-01-01T00:00:01.000000001Z one\n2024-01-01T00:00:02Z two-"),
            "{ts}"
        );
        let tail = read_all(LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        });
        assert_eq!(tail, "three\n", "the garbage line counts as a line");
        let since = read_all(LogOptions {
            since_nanos: Some(1_704_067_202_100_000_000),
            ..Default::default()
        });
        assert_eq!(since, "a\nthree\n");
        let limited = read_all(LogOptions {
            limit_bytes: Some(6),
            ..Default::default()
        });
        assert_eq!(limited, "one\ntw");
    }

    #[test]
    fn tail_of_unterminated_and_short_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, "a\nb\nc").unwrap();
        let mut f = File::open(&path).unwrap();
        assert_eq!(tail_start(&mut f, 1).unwrap(), 4);
        assert_eq!(tail_start(&mut f, 10).unwrap(), 0);
        assert_eq!(tail_start(&mut f, 0).unwrap(), 5);
    }

    #[test]
    fn follows_appends_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(
            &path,
            "2024-01-01T00:00:01Z stdout F a\n2024-01-01T00:00:01Z stdout F b",
        )
        .unwrap();
        let mut reader = LogReader::open(&path, following()).unwrap();
        let mut out = Vec::new();
        assert_eq!(reader.pump(&mut out).unwrap(), Pumped::CaughtUp(true));
        assert_eq!(out, b"a\n");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"c\n").unwrap();
        reader.pump(&mut out).unwrap();
        assert_eq!(out, b"a\nbc\n");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "2024-01-01T00:00:02Z stdout F new\n").unwrap();
        reader.pump(&mut out).unwrap();
        assert_eq!(out, b"a\nbc\nnew\n");
    }

    fn following() -> LogOptions {
        LogOptions {
            follow: true,
            ..Default::default()
        }
    }

    #[test]
    fn without_follow_a_read_ends_at_the_length_seen_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, lines(0..2)).unwrap();
        let mut reader = LogReader::open(&path, LogOptions::default()).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&lines(2..4)).unwrap();
        let mut out = Vec::new();
        assert_eq!(reader.pump(&mut out).unwrap(), Pumped::CaughtUp(true));
        assert_eq!(String::from_utf8(out).unwrap(), "0\n1\n");
    }

    #[test]
    fn a_symlinked_or_special_log_is_refused_and_a_deadline_ends_a_pump() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        for options in [LogOptions::default(), following()] {
            let err = LogReader::open(&path, options).err().unwrap();
            assert!(dir::is_not_regular(&err), "{err}");
        }
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, lines(0..3)).unwrap();
        let mut reader = LogReader::open(&path, following()).unwrap();
        reader.set_deadline(Instant::now());
        let mut out = Vec::new();
        assert_eq!(reader.pump(&mut out).unwrap(), Pumped::TimeUp);
        assert!(out.is_empty());
    }

    fn lines(range: std::ops::Range<u8>) -> Vec<u8> {
        range
            .map(|n| format!("2024-01-01T00:00:01Z stdout F {n}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn follow_reads_the_old_file_out_across_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, lines(0..2)).unwrap();
        let mut reader = LogReader::open(&path, following()).unwrap();
        let mut out = Vec::new();
        reader.pump(&mut out).unwrap();
        // The runtime writes more, then the file is rotated and a new one started.
        let mut old = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        old.write_all(&lines(2..4)).unwrap();
        std::fs::rename(&path, dir.path().join("0.log.20240101-000001")).unwrap();
        assert_eq!(reader.pump(&mut out).unwrap(), Pumped::CaughtUp(true));
        old.write_all(&lines(4..5)).unwrap();
        std::fs::write(&path, lines(5..7)).unwrap();
        reader.pump(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "0\n1\n2\n3\n4\n5\n6\n");
    }

    #[test]
    fn tail_takes_the_rest_from_the_newest_rotated_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(dir.path().join("0.log.20240101-000000.gz"), b"not read").unwrap();
        std::fs::write(dir.path().join("0.log.20240101-000001"), lines(0..5)).unwrap();
        std::fs::write(&path, lines(5..7)).unwrap();
        let read = |n| {
            let options = LogOptions {
                tail_lines: Some(n),
                ..Default::default()
            };
            let mut out = Vec::new();
            LogReader::open(&path, options)
                .unwrap()
                .pump(&mut out)
                .unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(read(2), "5\n6\n");
        assert_eq!(read(4), "3\n4\n5\n6\n");
        assert_eq!(read(100), "0\n1\n2\n3\n4\n5\n6\n");
        std::fs::write(&path, b"").unwrap();
        assert_eq!(read(1), "4\n", "an empty live file right after a rotation");
    }
}
