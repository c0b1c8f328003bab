//! The table's rules: one setting per name, good defaults, good fixed values.

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;
use crate::config::catalogue::Stance;
use crate::config::decode::apply_default;
use crate::config::Flags;

#[test]
fn every_flag_and_field_is_defined_once() {
    let mut flags = BTreeSet::new();
    let mut fields = BTreeSet::new();
    let mut shorts = BTreeSet::new();
    for s in all() {
        assert!(
            !s.flag.is_empty() || !s.field.is_empty(),
            "{s:?} has no name"
        );
        assert!(
            s.flag.is_empty() || flags.insert(s.flag),
            "flag {} twice",
            s.flag
        );
        assert!(
            s.field.is_empty() || fields.insert(s.field),
            "field {} twice",
            s.field
        );
        if let Some(c) = s.short {
            assert!(shorts.insert(c), "-{c} twice");
        }
        assert!(
            !is_struct(s.field) || s.field.is_empty(),
            "{} is a field and a struct",
            s.field
        );
    }
}

/// Every default is a good value of its setting, and matches the constants the
/// owning modules keep.
#[test]
fn defaults_are_good_values() {
    let mut flags = Flags::default();
    for s in all() {
        apply_default(s, &mut flags)
            .unwrap_or_else(|e| panic!("{s:?} default {:?}: {e}", s.default));
    }
    let d = Flags::defaults();
    assert_eq!(d.container_log_max_files, crate::logs::DEFAULT_MAX_FILES);
    assert_eq!(
        d.container_log_max_workers,
        crate::logs::DEFAULT_MAX_WORKERS
    );
    assert_eq!(
        d.container_log_monitor_interval,
        crate::logs::DEFAULT_MONITOR_INTERVAL
    );
    assert_eq!(d.server_max_connections, None, "sized by memory");
    assert_eq!(
        d.server_max_unauthenticated_connections,
        crate::server::DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS
    );
    assert_eq!(
        d.server_max_unauthenticated_per_client,
        crate::server::DEFAULT_MAX_UNAUTHENTICATED_PER_CLIENT
    );
    assert_eq!(
        d.node_status_report_frequency,
        crate::node::config::DEFAULT_NODE_STATUS_REPORT_FREQUENCY
    );
    let thresholds = crate::node::config::parse_eviction_hard(&crate::config::value::pairs_text(
        &d.eviction_hard,
        '<',
    ))
    .unwrap();
    assert_eq!(thresholds, crate::node::config::default_eviction_hard());
}

/// A fixed stance's values are values of the setting's kind (and the first, litelet's
/// own, is what `/configz` shows).
#[test]
fn fixed_values_have_their_settings_kind() {
    for s in all() {
        if let Stance::Fixed { values, why } = s.stance {
            assert!(!values.is_empty() && !why.is_empty(), "{s:?}");
            for v in values {
                let json: Value =
                    serde_json::from_str(v).unwrap_or_else(|e| panic!("{s:?} {v}: {e}"));
                s.kind
                    .check(&json)
                    .unwrap_or_else(|e| panic!("{s:?} {v}: {e}"));
            }
        }
    }
}

#[test]
fn only_implemented_settings_fill_flags() {
    for s in all() {
        let implemented = s.stance == Stance::Implemented;
        let special = matches!(s.flag, "help" | "version");
        assert_eq!(s.access.is_some(), implemented && !special, "{s:?}");
    }
    assert!(by_flag("v").is_some_and(|s| s.field == "logging.verbosity"));
    assert!(
        by_field("authentication.anonymous.enabled").is_some_and(|s| s.flag == "anonymous-auth")
    );
    assert!(is_struct("authentication") && is_struct("logging.options"));
}
