//! Object metadata checks of the API server (apimachinery `ValidateObjectMeta`):
//! label keys and values, annotation keys and the 256 KiB cap on all annotations.
//!
//! Pure; used by `validate` for static pods.

use std::collections::BTreeMap;

use super::{invalid, is_dns_subdomain, Invalid};

/// Upstream `TotalAnnotationSizeLimitB`: keys plus values of all annotations.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Longest name part of a qualified name, and longest label value.
const MAX_NAME_LEN: usize = 63;

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 bytes (empty is not).
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b.iter().all(|c| alnum(c) || b"-_.".contains(c))
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
}

/// A label or annotation key: an optional DNS subdomain prefix and `/`, then a name
/// part (upstream `IsQualifiedName`).
pub fn is_qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty() && is_dns_subdomain(prefix) && is_name_part(name)
        }
        None => is_name_part(key),
    }
}

/// A label value: empty, or a name part (upstream `IsValidLabelValue`).
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_name_part(value)
}

const QUALIFIED_HINT: &str = "must be a name of at most 63 alphanumerics, '-', '_' or \
                              '.' (starting and ending alphanumeric), optionally \
                              prefixed by a DNS subdomain and '/'";

pub fn validate_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), Invalid> {
    for (key, value) in labels {
        if !is_qualified_name(key) {
            return Err(invalid(field, format!("key {key:?}: {QUALIFIED_HINT}")));
        }
        if !is_label_value(value) {
            return Err(invalid(
                format!("{field}[{key}]"),
                format!(
                    "value {value:?}: must be empty or at most 63 alphanumerics, '-', '_' \
                     or '.', starting and ending alphanumeric"
                ),
            ));
        }
    }
    Ok(())
}

pub fn validate_annotations(
    field: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<(), Invalid> {
    let mut total = 0usize;
    for (key, value) in annotations {
        // Upstream checks the lowercased key.
        if !is_qualified_name(&key.to_ascii_lowercase()) {
            return Err(invalid(field, format!("key {key:?}: {QUALIFIED_HINT}")));
        }
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > MAX_ANNOTATIONS_BYTES {
        return Err(invalid(
            field,
            format!(
                "annotations are {total} bytes, more than the limit of {MAX_ANNOTATIONS_BYTES}"
            ),
        ));
    }
    Ok(())
}
