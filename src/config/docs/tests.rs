//! The texts: help lists every flag, roff is escaped, the table has every name.

use super::*;

#[test]
fn help_lists_every_flag() {
    let text = help(None);
    for s in table::all().iter().filter(|s| !s.flag.is_empty()) {
        assert!(
            text.contains(&format!("--{} ", s.flag))
                || text.contains(&format!("--{}\n", s.flag))
                || text.contains(&format!("--{}  ", s.flag)),
            "--{} missing",
            s.flag
        );
    }
    let sub = help(Some("ps"));
    assert!(sub.contains("--container-runtime-endpoint") && !sub.contains("--max-pods"));
}

/// Upstream's form (kubeadm reads it), litelet's version as build metadata.
#[test]
fn version_is_upstreams_form_with_litelets_version() {
    assert_eq!(
        version("true"),
        format!("Kubernetes v1.36.3+litelet.{}", env!("CARGO_PKG_VERSION"))
    );
    assert!(version("raw").contains(KUBELET_VERSION));
}

#[test]
fn roff_escapes_dashes_backslashes_and_leading_dots() {
    assert_eq!(roff("--max-pods"), "\\-\\-max\\-pods");
    assert_eq!(roff("a\\b"), "a\\eb");
    assert_eq!(roff(".conf files"), "\\&.conf files");
}

#[test]
fn the_table_names_every_setting() {
    let table = compatibility_table();
    for s in table::all() {
        let name = if s.flag.is_empty() {
            format!("`{}`", s.field)
        } else {
            format!("`--{}`", s.flag)
        };
        assert!(table.contains(&name), "{name} missing");
    }
}

#[test]
fn the_man_page_fills_every_placeholder() {
    let page = man_page(".TH LITELET 1 x @VERSION@\n.SH OPTIONS\n@OPTIONS@\n.SH FIELDS\n@FIELDS@\n.SH UP\n@UPSTREAM@\n");
    assert!(!page.contains('@'), "{page}");
    assert!(
        page.contains("\\fB\\-\\-max\\-pods\\fR \\fIN\\fR"),
        "{page}"
    );
    assert!(
        page.contains("\\fB\\-\\-read\\-only\\-port (readOnlyPort)\\fR"),
        "{page}"
    );
}
