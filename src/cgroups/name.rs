//! `CgroupName`: a cgroup's place in the hierarchy as a list of checked parts
//! (upstream `CgroupName`), printed in the cgroupfs driver's form `/kubepods/pod<uid>`.
//!
//! Every part is a single, non-empty path component that is neither `.` nor `..`, so a
//! name joined onto a mount root can never leave it. Pure; no I/O.

use std::fmt;
use std::path::PathBuf;

use super::CgroupError;

/// A validated cgroup path relative to a hierarchy's root. The empty name is the root.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CgroupName {
    parts: Vec<String>,
}

/// Checks one part of a cgroup name, e.g. `pod<uid>` built from an API object's UID.
pub fn check_part(part: &str) -> Result<(), CgroupError> {
    let reason = if part.is_empty() {
        "empty path part"
    } else if part == "." || part == ".." {
        "relative path part"
    } else if part.contains('/') {
        "contains '/'"
    } else if part.contains('\0') {
        "contains a nul byte"
    } else if part.chars().any(char::is_control) || part.contains(char::is_whitespace) {
        "contains whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(CgroupError::InvalidName {
        name: part.to_owned(),
        reason,
    })
}

impl CgroupName {
    /// The root of the hierarchy.
    pub fn root() -> CgroupName {
        CgroupName::default()
    }

    /// Parses a cgroupfs-style name such as `/`, `/kubepods` or `kubepods/burstable`.
    /// Empty parts and `.` are dropped; `..` is refused rather than resolved.
    pub fn parse(text: &str) -> Result<CgroupName, CgroupError> {
        let mut name = CgroupName::root();
        for part in text.split('/') {
            if part.is_empty() || part == "." {
                continue;
            }
            check_part(part).map_err(|_| CgroupError::InvalidName {
                name: text.to_owned(),
                reason: "not a plain cgroup path",
            })?;
            name.parts.push(part.to_owned());
        }
        Ok(name)
    }

    /// This name with one more checked part.
    pub fn child(&self, part: &str) -> Result<CgroupName, CgroupError> {
        check_part(part)?;
        let mut parts = self.parts.clone();
        parts.push(part.to_owned());
        Ok(CgroupName { parts })
    }

    /// The parts from the root down.
    pub fn parts(&self) -> &[String] {
        &self.parts
    }

    /// The last part, or `None` for the root.
    pub fn base(&self) -> Option<&str> {
        self.parts.last().map(String::as_str)
    }

    /// The enclosing cgroup, or `None` for the root.
    pub fn parent(&self) -> Option<CgroupName> {
        let (_, rest) = self.parts.split_last()?;
        Some(CgroupName {
            parts: rest.to_vec(),
        })
    }

    /// Whether this is the hierarchy's root.
    pub fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The cgroupfs driver's absolute form: `/` or `/a/b`.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.parts.join("/"))
    }

    /// The relative file-system path (`a/b`; empty for the root).
    pub fn to_relative_path(&self) -> PathBuf {
        self.parts.iter().collect()
    }
}

impl fmt::Display for CgroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_cgroupfs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let cases = [
            ("/", "/"),
            ("", "/"),
            ("/kubepods", "/kubepods"),
            ("kubepods/burstable", "/kubepods/burstable"),
            ("//a/./b/", "/a/b"),
        ];
        for (input, want) in cases {
            let name = CgroupName::parse(input).unwrap();
            assert_eq!(name.to_cgroupfs(), want, "{input:?}");
        }
    }

    #[test]
    fn parse_refuses_escapes() {
        for bad in ["/..", "/a/../b", "..", "a/ b", "a/\tb"] {
            assert!(
                matches!(CgroupName::parse(bad), Err(CgroupError::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn child_checks_its_part() {
        let root = CgroupName::parse("/kubepods").unwrap();
        assert_eq!(root.child("pod1").unwrap().to_cgroupfs(), "/kubepods/pod1");
        for bad in ["", ".", "..", "a/b", "a\0b", "a b"] {
            assert!(root.child(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parent_base_and_path() {
        let name = CgroupName::parse("/a/b").unwrap();
        assert_eq!(name.base(), Some("b"));
        assert_eq!(name.parent().unwrap().to_cgroupfs(), "/a");
        assert_eq!(name.to_relative_path(), PathBuf::from("a/b"));
        assert!(CgroupName::root().parent().is_none());
        assert!(CgroupName::root().is_root());
        assert_eq!(CgroupName::root().to_relative_path(), PathBuf::new());
    }
}
