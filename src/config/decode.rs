//! Puts the configuration together as upstream's kubelet does, and checks every value
//! against its setting's stance: litelet's defaults, under the `--config` file, under
//! the `--config-dir` drop-ins (JSON merge patch, in order), under the flags.
//!
//! Only what the user set is checked and applied: a setting absent everywhere keeps
//! litelet's default. A value litelet cannot honour, a value of the wrong type and a
//! bad value are problems, all reported together, each naming its setting and where
//! it was set; settings that change nothing and unknown config fields are warnings.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::catalogue::{Setting, Stance};
use super::cmdline::{self, CommandLine, CommandLineError};
use super::file;
use super::table;
use super::value::{short, Kind, ValueError};
use super::{Command, Flags, LoadError, RuntimeInfoFlags};

/// One thing wrong with one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where it was set: `config file PATH`, `drop-in PATH` or `command line`.
    pub source: String,
    /// The field (from a file) or the flag (from the command line).
    pub name: String,
    pub why: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.source, self.name, self.why)
    }
}

/// The problems as one message.
pub fn problems_text(problems: &[Problem]) -> String {
    let list: Vec<String> = problems.iter().map(Problem::to_string).collect();
    list.join("; ")
}

/// The flags of `litelet runtime-info` and `litelet ps`.
const RUNTIME_COMMAND_FLAGS: &[&str] = &[
    "container-runtime-endpoint",
    "runtime-request-timeout",
    "image-pull-timeout",
    "v",
    "help",
];

/// Reads `args` (program name first) and, when `read_files`, the config files.
pub fn load(args: Vec<String>, read_files: bool) -> Result<Flags, LoadError> {
    let rest = args.get(1..).unwrap_or_default();
    let command = match rest.first().map(String::as_str) {
        Some(name @ ("runtime-info" | "ps")) => Some(name),
        _ => None,
    };
    let rest = if command.is_some() { &rest[1..] } else { rest };
    let line = cmdline::parse(rest, |s| {
        command.is_none() || RUNTIME_COMMAND_FLAGS.contains(&s.flag)
    })
    .map_err(|e| for_command(e, command))?;
    if let Some(arg) = line.args.first() {
        return Err(CommandLineError::UnknownCommand(arg.clone()).into());
    }
    if line.has("help") {
        return Err(LoadError::Help(super::docs::help(command)));
    }
    if let Some(version) = line.last("version").filter(|v| v != "false") {
        return Err(LoadError::Version(super::docs::version(&version)));
    }
    let given = flag_values(&line)?;
    let mut doc = Document::default();
    let mut flags = Flags::defaults();
    if read_files && command.is_none() {
        doc.read_files(&given, &flags)?;
    }
    doc.overlay_flags(&given);
    let mut out = Outcome {
        warnings: deprecations(&line),
        ..Outcome::default()
    };
    out.warnings.append(&mut doc.warnings);
    out.problems.append(&mut doc.problems);
    for (setting, value, source) in doc.values(&given) {
        out.apply(setting, &value, &source, &mut flags);
    }
    if !out.problems.is_empty() {
        return Err(LoadError::Invalid(out.problems));
    }
    out.finish(&mut flags);
    flags.command = command.map(|name| {
        let inner = RuntimeInfoFlags {
            runtime: flags.runtime.clone(),
        };
        match name {
            "ps" => Command::Ps(inner),
            _ => Command::RuntimeInfo(inner),
        }
    });
    flags.check()?;
    Ok(flags)
}

fn for_command(e: CommandLineError, command: Option<&str>) -> CommandLineError {
    match (e, command) {
        (CommandLineError::UnknownFlag(flag), Some(command)) if table::by_flag(&flag).is_some() => {
            CommandLineError::NotForCommand {
                flag: format!("--{flag}"),
                command: command.to_owned(),
            }
        }
        (e, _) => e,
    }
}

/// Writes `setting`'s default into `flags`.
pub fn apply_default(setting: &Setting, flags: &mut Flags) -> Result<(), ValueError> {
    if setting.default.is_empty() {
        return Ok(());
    }
    let json = setting.kind.from_flag(setting.default, None)?;
    setting.apply(flags, &json)
}

/// Each flag's value as the JSON of its setting (repeats accumulated), in order of
/// first use.
fn flag_values(line: &CommandLine) -> Result<Vec<(&'static Setting, Value)>, CommandLineError> {
    let mut out: Vec<(&'static Setting, Value)> = Vec::new();
    for u in &line.uses {
        if matches!(u.setting.flag, "help" | "version") {
            continue;
        }
        let at = out.iter().position(|(s, _)| std::ptr::eq(*s, u.setting));
        let before = at.map(|i| &out[i].1);
        let text = u.value.as_deref().unwrap_or("true");
        let json =
            u.setting
                .kind
                .from_flag(text, before)
                .map_err(|why| CommandLineError::BadValue {
                    flag: format!("--{}", u.setting.flag),
                    value: text.to_owned(),
                    why: why.to_string(),
                })?;
        match at {
            Some(i) => out[i].1 = json,
            None => out.push((u.setting, json)),
        }
    }
    Ok(out)
}

/// Upstream's warning for each deprecated flag used.
fn deprecations(line: &CommandLine) -> Vec<String> {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for u in &line.uses {
        if let Some(message) = u.setting.deprecation.message() {
            if !seen.contains(&u.setting.flag) {
                seen.push(u.setting.flag);
                out.push(format!(
                    "Flag --{} has been deprecated, {message}",
                    u.setting.flag
                ));
            }
        }
    }
    out
}

/// The config files and flags merged into one KubeletConfiguration document.
#[derive(Default)]
struct Document {
    json: Value,
    /// Each field the user set, with where it was set last.
    set: BTreeMap<String, String>,
    warnings: Vec<String>,
    /// Struct fields that are not objects.
    problems: Vec<Problem>,
}

impl Document {
    fn read_files(
        &mut self,
        given: &[(&'static Setting, Value)],
        defaults: &Flags,
    ) -> Result<(), LoadError> {
        let path_of = |name: &str| {
            given
                .iter()
                .find(|(s, _)| s.flag == name)
                .and_then(|(_, v)| v.as_str())
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        };
        self.json = Value::Object(Map::new());
        if let Some(path) = path_of("config") {
            let fields = file::load(&path)?;
            let source = format!("config file {}", path.display());
            self.lay_fields("", &fields, &source);
            upstream_defaulting(&mut self.json, &mut self.set);
        }
        if let Some(dir) = path_of("config-dir") {
            self.seed_map_defaults(defaults);
            let (conf, _skipped) = file::dropins(&dir)?;
            for path in conf {
                let fields = file::load(&path)?;
                let source = format!("drop-in {}", path.display());
                file::merge_patch(&mut self.json, &Value::Object(fields.clone()));
                self.mark(&fields, &source);
            }
        }
        Ok(())
    }

    /// Sets each known field of `fields` (under `prefix`) at its path: the main file's
    /// values replace what is there (a map replaces the default map).
    fn lay_fields(&mut self, prefix: &str, fields: &Map<String, Value>, source: &str) {
        for (key, value) in fields {
            let path = join(prefix, key);
            if table::by_field(&path).is_some() {
                set_at(&mut self.json, &path, value.clone());
                self.set.insert(path, source.to_owned());
            } else if table::is_struct(&path) && value.is_object() {
                if let Value::Object(inner) = value {
                    self.lay_fields(&path, inner, source);
                }
            } else if table::is_struct(&path) && !value.is_null() {
                self.not_an_object(&path, value, source);
            } else if !value.is_null() {
                self.unknown(&path, source);
            }
        }
    }

    fn not_an_object(&mut self, path: &str, value: &Value, source: &str) {
        self.problems.push(Problem {
            source: source.to_owned(),
            name: path.to_owned(),
            why: format!("{} is not an object", short(value)),
        });
    }

    /// Marks the fields a drop-in names as set (its values are merged already).
    fn mark(&mut self, fields: &Map<String, Value>, source: &str) {
        let mut stack: Vec<(String, &Map<String, Value>)> = vec![(String::new(), fields)];
        while let Some((prefix, map)) = stack.pop() {
            for (key, value) in map {
                let path = join(&prefix, key);
                if table::by_field(&path).is_some() {
                    self.set.insert(path, source.to_owned());
                } else if let (true, Value::Object(inner)) = (table::is_struct(&path), value) {
                    stack.push((path, inner));
                } else if table::is_struct(&path) && !value.is_null() {
                    self.not_an_object(&path, value, source);
                } else if !value.is_null() {
                    self.unknown(&path, source);
                }
            }
        }
    }

    fn unknown(&mut self, path: &str, source: &str) {
        self.warnings.push(format!(
            "{source}: unknown field {path:?} (not in KubeletConfiguration {}): ignored, as \
             upstream's kubelet does",
            file::API_VERSION
        ));
    }

    /// Maps with a default (evictionHard) start from it, so a drop-in adds keys to it,
    /// as upstream merges drop-ins over the defaulted configuration.
    fn seed_map_defaults(&mut self, defaults: &Flags) {
        for s in table::all() {
            if s.field.is_empty()
                || !matches!(s.kind, Kind::Map(_))
                || get_at(&self.json, s.field).is_some()
            {
                continue;
            }
            if let Some(map) = s
                .show(defaults)
                .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
            {
                set_at(&mut self.json, s.field, map);
            }
        }
    }

    /// The flags with a field replace it (feature gates are merged by name, as upstream).
    fn overlay_flags(&mut self, given: &[(&'static Setting, Value)]) {
        for (setting, value) in given {
            if setting.field.is_empty() {
                continue;
            }
            let mut value = value.clone();
            if setting.kind == Kind::Gates {
                if let Some(Value::Object(old)) = get_at(&self.json, setting.field) {
                    let mut merged = old.clone();
                    merged.extend(value.as_object().cloned().unwrap_or_default());
                    value = Value::Object(merged);
                }
            }
            if !self.json.is_object() {
                self.json = Value::Object(Map::new());
            }
            set_at(&mut self.json, setting.field, value);
            self.set
                .insert(setting.field.to_owned(), format!("--{}", setting.flag));
        }
    }

    /// Every value the user set, with its setting and source, in catalogue order.
    fn values(
        &self,
        given: &[(&'static Setting, Value)],
    ) -> Vec<(&'static Setting, Value, String)> {
        let mut out = Vec::new();
        for setting in table::all() {
            if setting.field.is_empty() {
                if let Some((_, v)) = given.iter().find(|(s, _)| std::ptr::eq(*s, setting)) {
                    out.push((setting, v.clone(), "command line".to_owned()));
                }
                continue;
            }
            let (Some(source), Some(value)) = (
                self.set.get(setting.field),
                get_at(&self.json, setting.field),
            ) else {
                continue;
            };
            out.push((setting, value.clone(), source.clone()));
        }
        out
    }
}

/// Upstream's defaulting that spans fields: an explicit nodeStatusUpdateFrequency is
/// also nodeStatusReportFrequency's default.
fn upstream_defaulting(json: &mut Value, set: &mut BTreeMap<String, String>) {
    let (update, report) = ("nodeStatusUpdateFrequency", "nodeStatusReportFrequency");
    let given = |json: &Value, path| {
        get_at(json, path)
            .filter(|v| !Kind::Duration.is_zero(v))
            .cloned()
    };
    if let (Some(value), None) = (given(json, update), given(json, report)) {
        set_at(json, report, value);
        if let Some(source) = set.get(update).cloned() {
            set.insert(report.to_owned(), source);
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// The value at dotted `path` (keys may hold dots only in the last part: none do).
fn get_at<'a>(json: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(json, |v, key| v.as_object()?.get(key))
        .filter(|v| !v.is_null())
}

fn set_at(json: &mut Value, path: &str, value: Value) {
    let mut at = json;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Value::Object(map) = at else { return };
        if keys.peek().is_none() {
            map.insert(key.to_owned(), value);
            return;
        }
        at = map.entry(key.to_owned()).or_insert(Value::Null);
    }
}

/// What checking the values found.
#[derive(Default)]
struct Outcome {
    problems: Vec<Problem>,
    warnings: Vec<String>,
    /// Settings accepted that change nothing, with why.
    no_effect: Vec<String>,
}

impl Outcome {
    /// Checks `value` of `setting` (set in `source`) and writes it into `flags`.
    fn apply(&mut self, setting: &'static Setting, value: &Value, source: &str, flags: &mut Flags) {
        let from_file = !source.starts_with("--") && source != "command line";
        let name = if from_file {
            setting.field.to_owned()
        } else {
            setting.name()
        };
        let source = if from_file { source } else { "command line" };
        let mut problem = |why: String| {
            self.problems.push(Problem {
                source: source.to_owned(),
                name: name.clone(),
                why,
            })
        };
        if value.is_null() {
            return;
        }
        if let Err(why) = setting.kind.check(value) {
            return problem(why.to_string());
        }
        if from_file && setting.zero_is_unset && setting.kind.is_zero(value) {
            return;
        }
        match setting.stance {
            Stance::Implemented => {
                if let Err(why) = setting.apply(flags, value) {
                    problem(why.to_string());
                }
            }
            Stance::Fixed { values, why } => {
                let accepted: Vec<Value> = values
                    .iter()
                    .filter_map(|v| serde_json::from_str(v).ok())
                    .collect();
                if accepted.iter().any(|a| setting.kind.same(a, value)) {
                    self.no_effect.push(format!("{} ({why})", setting.names()));
                } else {
                    let list: Vec<&str> = values.to_vec();
                    problem(format!(
                        "{} is not supported: {why} (litelet accepts {})",
                        short(value),
                        list.join(" or ")
                    ));
                }
            }
            Stance::Ignored(why) => self.no_effect.push(format!("{} ({why})", setting.names())),
        }
    }

    fn finish(mut self, flags: &mut Flags) {
        if flags.merge_default_eviction_settings {
            let mut defaults = Flags::default();
            if let Some(hard) = table::by_field("evictionHard") {
                let _ = apply_default(hard, &mut defaults);
            }
            for (signal, value) in defaults.eviction_hard {
                flags.eviction_hard.entry(signal).or_insert(value);
            }
        }
        if !self.no_effect.is_empty() {
            self.warnings.push(format!(
                "accepted, but no effect in litelet: {}",
                self.no_effect.join("; ")
            ));
        }
        flags.warnings = self.warnings;
    }
}

/// Reads `path`'s KubeletConfiguration as litelet would run it (for tests and
/// `/configz` round trips): the file alone over the defaults.
pub fn from_file(path: &Path) -> Result<Flags, LoadError> {
    load(
        vec![
            "litelet".to_owned(),
            "--config".to_owned(),
            path.display().to_string(),
        ],
        true,
    )
}

#[cfg(test)]
mod tests;
