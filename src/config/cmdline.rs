//! The command line, read with the rules of pflag (the Go flag library upstream's
//! kubelet uses), so real kubelet command lines mean what they mean there:
//!
//! - `--flag=value` and `--flag value`; a boolean flag takes no separate value: bare
//!   `--flag` is true, `--flag=false` false, and in `--flag false` the `false` is an
//!   argument (which the kubelet refuses as an unknown command);
//! - `-v 3`, `-v=3`, `-v3` for one-letter flags; `_` reads as `-` in names;
//! - a repeated flag replaces its value, except lists and maps, which accumulate;
//! - `--` ends the flags.
//!
//! [`parse`] is pure: it turns arguments into flag uses in order, each resolved to
//! its [`Setting`]; the values are read by `decode`.

use super::catalogue::Setting;
use super::table;
use super::value::Shape;

/// A command line that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandLineError {
    #[error("unknown flag: --{0}")]
    UnknownFlag(String),
    #[error("unknown shorthand flag: '{letter}' in -{group}")]
    UnknownShorthand { letter: char, group: String },
    #[error("flag needs an argument: {0}")]
    NeedsArgument(String),
    #[error("bad flag syntax: {0}")]
    BadSyntax(String),
    #[error("invalid argument {value:?} for \"{flag}\" flag: {why}")]
    BadValue {
        flag: String,
        value: String,
        why: String,
    },
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    #[error("flag {flag} is not a flag of `litelet {command}`")]
    NotForCommand { flag: String, command: String },
    #[error("argument {0} is not valid UTF-8")]
    NotUtf8(usize),
}

/// One flag as given.
#[derive(Debug, Clone)]
pub struct FlagUse {
    pub setting: &'static Setting,
    /// `None`: a bare boolean flag.
    pub value: Option<String>,
}

/// The command line, read.
#[derive(Debug, Clone, Default)]
pub struct CommandLine {
    pub uses: Vec<FlagUse>,
    /// Arguments that are not flags.
    pub args: Vec<String>,
}

/// Reads `args` (without the program name); `known` says which settings may appear
/// (all, or a subcommand's).
pub fn parse(
    args: &[String],
    known: impl Fn(&Setting) -> bool,
) -> Result<CommandLine, CommandLineError> {
    let mut line = CommandLine::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            line.args.extend(rest.by_ref().cloned());
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            if name.is_empty() || name.starts_with('-') || name.starts_with('=') {
                return Err(CommandLineError::BadSyntax(arg.clone()));
            }
            let name = name.replace('_', "-");
            let setting = table::by_flag(&name)
                .filter(|s| s.flag == name && known(s))
                .ok_or_else(|| CommandLineError::UnknownFlag(name.clone()))?;
            let value = match (attached, setting.kind.shape()) {
                (Some(v), _) => Some(v),
                (None, Shape::Bool) => None,
                (None, _) => Some(
                    rest.next()
                        .cloned()
                        .ok_or_else(|| CommandLineError::NeedsArgument(format!("--{name}")))?,
                ),
            };
            line.uses.push(FlagUse { setting, value });
        } else if let Some(group) = arg.strip_prefix('-').filter(|g| !g.is_empty()) {
            shorthands(group, &mut rest, &known, &mut line)?;
        } else {
            line.args.push(arg.clone());
        }
    }
    Ok(line)
}

/// `-v3`, `-v 3`, `-v=3`, `-h`: one-letter flags, booleans possibly grouped.
fn shorthands<'a>(
    group: &str,
    rest: &mut impl Iterator<Item = &'a String>,
    known: &impl Fn(&Setting) -> bool,
    line: &mut CommandLine,
) -> Result<(), CommandLineError> {
    for (at, letter) in group.char_indices() {
        let setting = table::all()
            .iter()
            .find(|s| s.short == Some(letter) && known(s))
            .ok_or_else(|| CommandLineError::UnknownShorthand {
                letter,
                group: group.to_owned(),
            })?;
        let after = &group[at + letter.len_utf8()..];
        if let Some(v) = after.strip_prefix('=') {
            line.uses.push(FlagUse {
                setting,
                value: Some(v.to_owned()),
            });
            return Ok(());
        }
        if setting.kind.shape() == Shape::Bool {
            line.uses.push(FlagUse {
                setting,
                value: None,
            });
            continue;
        }
        let value = if after.is_empty() {
            rest.next()
                .cloned()
                .ok_or_else(|| CommandLineError::NeedsArgument(format!("'{letter}' in -{group}")))?
        } else {
            after.to_owned()
        };
        line.uses.push(FlagUse {
            setting,
            value: Some(value),
        });
        return Ok(());
    }
    Ok(())
}

impl CommandLine {
    /// Whether flag `name` was given.
    pub fn has(&self, name: &str) -> bool {
        self.uses.iter().any(|u| u.setting.flag == name)
    }

    /// The last value of flag `name` (a bare boolean flag is `true`).
    pub fn last(&self, name: &str) -> Option<String> {
        self.uses
            .iter()
            .rev()
            .find(|u| u.setting.flag == name)
            .map(|u| u.value.clone().unwrap_or_else(|| "true".to_owned()))
    }
}

#[cfg(test)]
mod tests;
