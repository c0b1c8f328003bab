//! The table of every setting, litelet's (`settings.rs`) then upstream's others
//! (`upstream.rs`), built once on first use, and lookups by flag and by field. The
//! command line, the config file, `/configz`, `--help`, the man page and the
//! compatibility table are all derived from [`all`].

use std::sync::OnceLock;

use super::catalogue::Setting;

/// Every setting: litelet's, then upstream's others.
pub fn all() -> &'static [Setting] {
    static ALL: OnceLock<Vec<Setting>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut all = super::settings::table();
        all.extend(super::upstream::table());
        all
    })
}

/// The setting of flag `name` (long name without dashes, or a one-letter name).
pub fn by_flag(name: &str) -> Option<&'static Setting> {
    let mut letters = name.chars();
    let short = match (letters.next(), letters.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    };
    all()
        .iter()
        .find(|s| (!s.flag.is_empty() && s.flag == name) || (short.is_some() && s.short == short))
}

/// The setting of config field `path` (`authentication.anonymous.enabled`).
pub fn by_field(path: &str) -> Option<&'static Setting> {
    all()
        .iter()
        .find(|s| !s.field.is_empty() && s.field == path)
}

/// Whether `path` is a struct field of the KubeletConfiguration whose own fields are
/// settings (`authentication`, `authentication.webhook`, `logging.options.text`).
pub fn is_struct(path: &str) -> bool {
    let prefix = format!("{path}.");
    all().iter().any(|s| s.field.starts_with(&prefix))
}

#[cfg(test)]
mod tests;
