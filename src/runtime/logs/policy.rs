//! Pure rotation decisions (upstream container_log_manager.go's rotateLog, split from
//! its I/O): given the live log's size, the names next to it and the time, what to
//! remove, what to compress and what to rename the live file to.
//!
//! Names follow upstream so log shippers and `crictl` see the same layout:
//! `0.log` (live), `0.log.20240102-030405` (the newest rotated copy, kept plain so a
//! reader that still has it open can finish), `0.log.<ts>.gz` (older ones), and
//! `0.log.<ts>.tmp` (a compression in progress, removed at the next rotation).
//! No clock and no file system here: "now" and the listing are arguments.
//!
//! Used by the `logs` module's rotator and by the reader beside it here (which file a
//! tail continues into), so both agree on the names.

/// Suffix of a compressed rotated log.
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a half-written compressed log.
pub const TMP_SUFFIX: &str = ".tmp";

/// When to rotate and how many files to keep (upstream LogRotatePolicy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotatePolicy {
    /// Rotate once the live file holds at least this many bytes.
    pub max_size: u64,
    /// Files per container log at most, the live one included (at least 2).
    pub max_files: usize,
}

/// The steps of one rotation, to be carried out in this order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RotationPlan {
    /// Leftovers (temp files, plain copies already compressed) and the oldest copies
    /// beyond `max_files`, oldest first.
    pub remove: Vec<String>,
    /// Plain rotated copies to gzip into `<name>.gz` (then removed).
    pub compress: Vec<String>,
    /// The live file's new name; the runtime then reopens the live name.
    pub rotate_to: String,
}

/// What one container's log needs now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Smaller than `max_size`.
    UnderLimit,
    /// The rotated name for this second is taken (rotated already this second):
    /// renaming would overwrite it, so wait for the next round.
    NameTaken(String),
    Rotate(RotationPlan),
}

/// Decides for the live file `live` (a file name, not a path) of `size` bytes, with
/// `siblings` the names in its directory (any; only `<live>.*` are considered) and
/// `now` in unix seconds (UTC).
pub fn decide(
    policy: &RotatePolicy,
    live: &str,
    size: u64,
    siblings: &[String],
    now: i64,
) -> Decision {
    if size < policy.max_size {
        return Decision::UnderLimit;
    }
    let rotate_to = format!("{live}.{}", timestamp(now));
    let rotated = rotated_names(live, siblings);
    if rotated.contains(&rotate_to) {
        return Decision::NameTaken(rotate_to);
    }
    let (mut in_use, mut remove) = split_unused(&rotated);
    in_use.sort();
    // The live file and the copy about to be made take two of the slots.
    let keep = policy.max_files.saturating_sub(2);
    let excess = in_use.len().saturating_sub(keep);
    remove.extend(in_use.drain(..excess));
    let compress = in_use
        .into_iter()
        .filter(|n| !n.ends_with(COMPRESS_SUFFIX))
        .collect();
    Decision::Rotate(RotationPlan {
        remove,
        compress,
        rotate_to,
    })
}

/// The rotated copies of `live` a reader may use, oldest first (upstream GetAllLogs
/// without the live file).
pub fn rotated_in_use(live: &str, siblings: &[String]) -> Vec<String> {
    let (mut in_use, _) = split_unused(&rotated_names(live, siblings));
    in_use.sort();
    in_use
}

/// `<live>.*` among `siblings`.
fn rotated_names(live: &str, siblings: &[String]) -> Vec<String> {
    let prefix = format!("{live}.");
    siblings
        .iter()
        .filter(|n| n.len() > prefix.len() && n.starts_with(&prefix))
        .cloned()
        .collect()
}

/// Splits rotated names into (in use, leftovers): temp files and plain copies whose
/// compressed twin exists are leftovers of an interrupted rotation.
fn split_unused(names: &[String]) -> (Vec<String>, Vec<String>) {
    names.iter().cloned().partition(|n| {
        if n.ends_with(TMP_SUFFIX) {
            return false;
        }
        if n.ends_with(COMPRESS_SUFFIX) {
            return true;
        }
        let twin = format!("{n}{COMPRESS_SUFFIX}");
        !names.contains(&twin)
    })
}

/// `YYYYMMDD-hhmmss` in UTC (upstream's layout `20060102-150405`; upstream uses local
/// time, litelet UTC so names never go backwards across a time-zone change). Sorting
/// the names sorts the copies by age.
pub fn timestamp(unix_secs: i64) -> String {
    let t = crate::api::meta::utc_from_unix(unix_secs);
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    /// 2024-01-02T03:04:05Z.
    const NOW: i64 = 1_704_164_645;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn policy(max_files: usize) -> RotatePolicy {
        RotatePolicy {
            max_size: MIB,
            max_files,
        }
    }

    /// One table row: the policy's max files, the live size, the directory, and the
    /// expected (remove, compress) of the plan (None: no rotation).
    fn check(
        name: &str,
        max_files: usize,
        size: u64,
        dir: &[&str],
        want: Option<(&[&str], &[&str])>,
    ) {
        let got = decide(&policy(max_files), "0.log", size, &names(dir), NOW);
        match (want, got) {
            (None, Decision::UnderLimit) => {}
            (Some((remove, compress)), Decision::Rotate(plan)) => {
                assert_eq!(plan.remove, names(remove), "{name}: remove");
                assert_eq!(plan.compress, names(compress), "{name}: compress");
                assert_eq!(plan.rotate_to, "0.log.20240102-030405", "{name}");
            }
            (want, got) => panic!("{name}: wanted {want:?}, got {got:?}"),
        }
    }

    #[test]
    fn rotation_decisions() {
        check("under the limit", 5, MIB - 1, &["0.log"], None);
        check(
            "under the limit leaves leftovers alone",
            5,
            10,
            &["0.log", "0.log.20240101-000000.tmp"],
            None,
        );
        check("first rotation", 5, MIB, &["0.log"], Some((&[], &[])));
        check(
            "the previous newest copy gets compressed",
            5,
            MIB,
            &["0.log", "0.log.20240101-000000"],
            Some((&[], &["0.log.20240101-000000"])),
        );
        check(
            "oldest copies go beyond max files",
            3,
            2 * MIB,
            &[
                "0.log",
                "0.log.20240101-000002",
                "0.log.20240101-000001.gz",
                "0.log.20240101-000000.gz",
            ],
            Some((
                &["0.log.20240101-000000.gz", "0.log.20240101-000001.gz"],
                &["0.log.20240101-000002"],
            )),
        );
        check(
            "two files keep no copy but the one being made",
            2,
            MIB,
            &["0.log", "0.log.20240101-000000"],
            Some((&["0.log.20240101-000000"], &[])),
        );
        check(
            "leftovers of an interrupted compression are removed first",
            5,
            MIB,
            &[
                "0.log",
                "0.log.20240101-000000",
                "0.log.20240101-000000.gz",
                "0.log.20240101-000001.tmp",
            ],
            Some((&["0.log.20240101-000000", "0.log.20240101-000001.tmp"], &[])),
        );
        check(
            "other containers' files are not ours",
            3,
            MIB,
            &["0.log", "1.log", "1.log.20240101-000000", "0.logx"],
            Some((&[], &[])),
        );
    }

    #[test]
    fn a_second_rotation_in_the_same_second_waits() {
        let dir = names(&["0.log", "0.log.20240102-030405"]);
        assert_eq!(
            decide(&policy(5), "0.log", MIB, &dir, NOW),
            Decision::NameTaken("0.log.20240102-030405".into())
        );
    }

    #[test]
    fn readers_see_copies_oldest_first() {
        let dir = names(&[
            "0.log",
            "0.log.20240101-000002",
            "0.log.20240101-000001.gz",
            "0.log.20240101-000001",
            "0.log.20240101-000003.tmp",
        ]);
        assert_eq!(
            rotated_in_use("0.log", &dir),
            names(&["0.log.20240101-000001.gz", "0.log.20240101-000002"])
        );
    }

    #[test]
    fn timestamps_are_utc_and_sort_by_age() {
        assert_eq!(timestamp(0), "19700101-000000");
        assert_eq!(timestamp(NOW), "20240102-030405");
        assert_eq!(timestamp(951_782_400), "20000229-000000");
        assert!(timestamp(NOW) < timestamp(NOW + 1));
        assert!(timestamp(NOW + 86_399) < timestamp(NOW + 86_400));
    }
}
