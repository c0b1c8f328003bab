//! Texts derived from the catalogue: `--help`, `--version`, the man page's flag and
//! field sections (`packaging/litelet.1`, from `packaging/litelet.1.in`) and the
//! compatibility table of every upstream name (`docs/kubelet-compatibility.md`).
//! Pure; `tests/fakes/generated_docs.rs` keeps the files current.

use std::fmt::Write as _;

use super::catalogue::{Setting, Stance};
use super::table;
use super::value::Kind;

/// The Kubernetes version whose kubelet litelet follows.
pub use crate::node::{KUBELET_VERSION, KUBERNETES_VERSION};

/// `--version`: upstream's form, which kubeadm's preflight reads from `kubelet
/// --version` (`Kubernetes v1.36.3`), with litelet's own version as the semver build
/// metadata (`+litelet.0.1.0`); `--version=raw`, upstream's version struct.
pub fn version(value: &str) -> String {
    let litelet = env!("CARGO_PKG_VERSION");
    match value {
        "raw" => format!(
            "version.Info{{Major:\"1\", Minor:\"36\", GitVersion:\"{KUBELET_VERSION}\", \
             Litelet:\"{litelet}\"}}"
        ),
        _ => format!("Kubernetes {KUBELET_VERSION}"),
    }
}

/// The placeholder of a flag's value in help and the man page.
fn value_name(s: &Setting) -> &'static str {
    let f = s.flag;
    match s.kind {
        Kind::Bool => "",
        _ if f.ends_with("-file")
            || f.ends_with("kubeconfig")
            || f == "config"
            || f == "resolv-conf" =>
        {
            "FILE"
        }
        _ if f.ends_with("-dir") || f.ends_with("-path") => "DIR",
        _ if f.ends_with("address") || f == "node-ip" => "IP",
        _ if f.ends_with("endpoint") => "URL",
        _ if f.ends_with("-cgroup") || f == "cgroup-root" => "CGROUP",
        Kind::Int | Kind::Float => "N",
        Kind::Duration => "DURATION",
        Kind::List => "VALUE,...",
        Kind::Map('<') => "SIGNAL<VALUE,...",
        Kind::Map(_) => "KEY=VALUE,...",
        Kind::Headers => "NAME:VALUE,...",
        Kind::Gates => "NAME=BOOL,...",
        Kind::Taints => "KEY=VALUE:EFFECT,...",
        Kind::Str | Kind::Object => "VALUE",
    }
}

fn flag_title(s: &Setting) -> String {
    let short = s.short.map(|c| format!("-{c}, ")).unwrap_or_default();
    match value_name(s) {
        "" => format!("{short}--{}", s.flag),
        v => format!("{short}--{} {v}", s.flag),
    }
}

fn default_note(s: &Setting) -> String {
    if s.default.is_empty() || s.kind == Kind::Bool && s.default == "false" {
        String::new()
    } else {
        format!(" (default {})", s.default)
    }
}

fn field_note(s: &Setting) -> String {
    if s.field.is_empty() || s.flag.is_empty() {
        String::new()
    } else {
        format!(" [{}]", s.field)
    }
}

/// `--help` of the agent (`command` None) or of a subcommand.
pub fn help(command: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "litelet: a small Kubernetes node agent (kubelet) for edge machines\n\n\
         Usage:\n  litelet [flags]\n  litelet runtime-info [--container-runtime-endpoint URL]\n  \
         litelet ps [--container-runtime-endpoint URL]\n"
    );
    let shown = |s: &&Setting| !s.flag.is_empty() && (command.is_none() || runtime_flag(s));
    let _ = writeln!(
        out,
        "Flags (the upstream kubelet's names; [field] is the config file's):"
    );
    for s in table::all().iter().filter(shown) {
        if s.stance == Stance::Implemented {
            let _ = writeln!(
                out,
                "  {:<44} {}{}{}",
                flag_title(s),
                s.doc,
                default_note(s),
                field_note(s)
            );
        }
    }
    if command.is_some() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nUpstream kubelet flags litelet takes at one value (any other stops it):"
    );
    for s in table::all().iter().filter(shown) {
        if let Stance::Fixed { values, why } = s.stance {
            let _ = writeln!(
                out,
                "  {:<44} {}: {why}",
                flag_title(s),
                values.join(" or ")
            );
        }
    }
    let _ = writeln!(
        out,
        "\nUpstream kubelet flags that change nothing in litelet:"
    );
    for s in table::all().iter().filter(shown) {
        if let Stance::Ignored(why) = s.stance {
            let _ = writeln!(out, "  {:<44} {why}", flag_title(s));
        }
    }
    out
}

fn runtime_flag(s: &Setting) -> bool {
    matches!(
        s.flag,
        "container-runtime-endpoint"
            | "runtime-request-timeout"
            | "image-pull-timeout"
            | "v"
            | "help"
    )
}

/// Text for roff: backslashes and dashes escaped, no line starting with a dot.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// The man page: `template` with `@VERSION@`, `@OPTIONS@`, `@FIELDS@` and `@UPSTREAM@`
/// filled in from the catalogue.
pub fn man_page(template: &str) -> String {
    let mut options = String::new();
    let mut fields = Vec::new();
    let mut upstream = String::new();
    for s in table::all() {
        match s.stance {
            Stance::Implemented if !s.flag.is_empty() => {
                let title = match (s.short, value_name(s)) {
                    (Some(c), v) => format!(
                        "\\fB\\-{c}\\fR, \\fB{}\\fR \\fI{v}\\fR",
                        roff(&format!("--{}", s.flag))
                    ),
                    (None, "") => format!("\\fB{}\\fR", roff(&format!("--{}", s.flag))),
                    (None, v) => format!(
                        "\\fB{}\\fR \\fI{}\\fR",
                        roff(&format!("--{}", s.flag)),
                        roff(v)
                    ),
                };
                let _ = writeln!(
                    options,
                    ".TP\n{title}\n{}{}{}",
                    roff(s.doc),
                    roff(&default_note(s)),
                    roff(&field_note(s))
                );
                if !s.field.is_empty() {
                    fields.push(s.field);
                }
            }
            Stance::Implemented if !s.field.is_empty() => {
                let _ = writeln!(
                    options,
                    ".TP\n\\fB{}\\fR (config file only)\n{}{}",
                    roff(s.field),
                    roff(s.doc),
                    roff(&default_note(s))
                );
                fields.push(s.field);
            }
            Stance::Fixed { values, why } => {
                let _ = writeln!(
                    upstream,
                    ".TP\n\\fB{}\\fR\n{}: {}",
                    roff(&s.names()),
                    roff(&values.join(" or ")),
                    roff(why)
                );
            }
            Stance::Ignored(why) => {
                let _ = writeln!(
                    upstream,
                    ".TP\n\\fB{}\\fR\nno effect: {}",
                    roff(&s.names()),
                    roff(why)
                );
            }
            Stance::Implemented => {}
        }
    }
    template
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
        .replace("@OPTIONS@\n", &options)
        .replace("@FIELDS@", &roff(&fields.join(", ")))
        .replace("@UPSTREAM@\n", &upstream)
}

fn stance_cell(s: &Setting) -> String {
    match s.stance {
        Stance::Implemented => "implemented".into(),
        Stance::Fixed { values, .. } => format!("fixed: {}", values.join(" or ")),
        Stance::Ignored(_) => "accepted, no effect".into(),
    }
}

fn note_cell(s: &Setting) -> String {
    let mut note = match s.stance {
        Stance::Implemented => s.doc.to_owned(),
        Stance::Fixed { why, .. } | Stance::Ignored(why) => why.to_owned(),
    };
    if s.litelet_flag && !s.flag.is_empty() {
        note.push_str(" The flag is litelet's own.");
    }
    if s.litelet_field && !s.field.is_empty() {
        note.push_str(" The field is litelet's own.");
    }
    note.replace('|', "\\|")
}

fn code(name: &str, prefix: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!("`{prefix}{name}`")
    }
}

/// `docs/kubelet-compatibility.md`: every upstream flag and field (and litelet's own),
/// with litelet's stance.
pub fn compatibility_table() -> String {
    let mut out = String::from(
        "# litelet and the upstream kubelet's settings\n\n\
         Generated from `src/config/settings.rs` and `src/config/upstream.rs` by \
         `tests/fakes/generated_docs.rs`; do not edit. Every flag of the upstream kubelet \
         v1.36 and every KubeletConfiguration v1beta1 field is listed, with litelet's \
         stance (`tests/fakes/upstream_names.rs` holds the list against the upstream binary):\n\n\
         - **implemented**: litelet does what it says;\n\
         - **fixed: V**: litelet always behaves as V says; V is accepted (with one \
           start-up warning that it changes nothing) and any other value stops litelet \
           at start, naming the setting and why;\n\
         - **accepted, no effect**: any value is accepted, with one start-up warning.\n\n\
         Flags override `--config`, which the `--config-dir` drop-ins override. An unknown \
         config field is a warning, as upstream's lenient decoding.\n\n\
         | flag | config field | litelet | note |\n|---|---|---|---|\n",
    );
    let mut rows: Vec<&Setting> = table::all()
        .iter()
        .filter(|s| !matches!(s.flag, "help" | "version") || s.field.is_empty())
        .collect();
    rows.sort_by_key(|s| {
        if s.flag.is_empty() {
            (1, s.field)
        } else {
            (0, s.flag)
        }
    });
    for s in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(s.flag, "--"),
            code(s.field, ""),
            stance_cell(s),
            note_cell(s)
        );
    }
    out
}

#[cfg(test)]
mod tests;
