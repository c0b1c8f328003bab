//! The files generated from the settings catalogue are current: the man page
//! (`packaging/litelet.1`, from `packaging/litelet.1.in`) and the compatibility table
//! (`docs/kubelet-compatibility.md`). A stale file is rewritten and the test fails,
//! so the change shows in `git diff` and gets committed (rust-analyzer's
//! `ensure_file_contents`).

use std::path::Path;

fn ensure_current(path: &str, contents: &str) {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let old = std::fs::read_to_string(&full).unwrap_or_default();
    if old == contents {
        return;
    }
    std::fs::write(&full, contents).unwrap_or_else(|e| panic!("write {path}: {e}"));
    panic!("{path} was not current; it is now rewritten: commit it");
}

#[test]
fn the_man_page_is_current() {
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/litelet.1.in");
    let template = std::fs::read_to_string(&template).expect("packaging/litelet.1.in");
    ensure_current(
        "packaging/litelet.1",
        &litelet::config::docs::man_page(&template),
    );
}

#[test]
fn the_compatibility_table_is_current() {
    ensure_current(
        "docs/kubelet-compatibility.md",
        &litelet::config::docs::compatibility_table(),
    );
}
