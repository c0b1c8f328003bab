//! What a setting is: its flag, its KubeletConfiguration field, its kind, its default,
//! its documentation and litelet's stance on it ([`Setting`]), and how an implemented
//! one reads and writes its [`super::Flags`] field ([`Access`], the `at!` macro).
//!
//! The settings themselves are listed in `settings.rs` (litelet's) and `upstream.rs`
//! (the rest of upstream's); `table.rs` joins them and finds them by name.

use serde_json::Value;

use super::value::{Kind, SettingValue, ValueError};
use super::Flags;

/// What litelet does with a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stance {
    /// litelet carries it out.
    Implemented,
    /// litelet always behaves as `values[0]` says: any of `values` (JSON texts) is
    /// accepted, with one start-up warning that it changes nothing; any other value
    /// stops litelet at start, naming the setting and `why`.
    Fixed {
        values: &'static [&'static str],
        why: &'static str,
    },
    /// Accepted at any value with one start-up warning: it changes nothing, in litelet
    /// as in upstream's kubelet on Linux with a CRI runtime (`why` says why).
    Ignored(&'static str),
}

/// How upstream marks the flag as deprecated (it warns when the flag is used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deprecation {
    None,
    /// "This parameter should be set via the config file ...": flags with a field.
    UseConfigFile,
    /// Flags cAdvisor registered in the kubelet.
    Cadvisor,
    /// Upstream's own words.
    Text(&'static str),
}

/// Upstream's deprecation of its dead-container flags.
pub const DEAD_CONTAINERS: &str =
    "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.";

impl Deprecation {
    /// The words upstream puts after "Flag --x has been deprecated, ".
    pub fn message(self) -> Option<&'static str> {
        match self {
            Deprecation::None => None,
            Deprecation::UseConfigFile => Some(
                "This parameter should be set via the config file specified by the Kubelet's \
                 --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ \
                 for more information.",
            ),
            Deprecation::Cadvisor => Some(
                "This is a cadvisor flag that was mistakenly registered with the Kubelet. Due to \
                 legacy concerns, it will follow the standard CLI deprecation timeline before \
                 being removed.",
            ),
            Deprecation::Text(text) => Some(text),
        }
    }
}

type Apply = Box<dyn Fn(&mut Flags, &Value) -> Result<(), ValueError> + Send + Sync>;
type Show = Box<dyn Fn(&Flags) -> Value + Send + Sync>;

/// Reads and writes the [`Flags`] field of an implemented setting.
pub struct Access {
    kind: Kind,
    apply: Apply,
    show: Show,
}

impl Access {
    /// The field `get`/`get_mut` point at; `check` validates a decoded value.
    pub fn of<T: SettingValue + 'static>(
        get: fn(&Flags) -> &T,
        get_mut: fn(&mut Flags) -> &mut T,
        check: fn(&T) -> Result<(), ValueError>,
    ) -> Access {
        Access {
            kind: T::KIND,
            apply: Box::new(move |flags, json| {
                let value = T::decode(json)?;
                check(&value)?;
                *get_mut(flags) = value;
                Ok(())
            }),
            show: Box::new(move |flags| get(flags).encode()),
        }
    }
}

/// The [`Access`] of a `Flags` field (`at!(max_pods)`, `at!(runtime.image_pull_timeout)`),
/// optionally with a check of the decoded value (`at!(max_pods, check = f)`).
macro_rules! at {
    ($($field:ident).+) => {
        $crate::config::catalogue::Access::of(
            |f| &f.$($field).+, |f| &mut f.$($field).+, |_| Ok(()))
    };
    ($($field:ident).+, check = $check:expr) => {
        $crate::config::catalogue::Access::of(|f| &f.$($field).+, |f| &mut f.$($field).+, $check)
    };
}
pub(crate) use at;

/// One setting of the kubelet's: a flag, a config-file field, or both.
pub struct Setting {
    /// The flag's name without dashes (`max-pods`); empty when it has none.
    pub flag: &'static str,
    /// The one-letter flag (`v`).
    pub short: Option<char>,
    /// The KubeletConfiguration field, nested fields joined by dots
    /// (`authentication.anonymous.enabled`); empty when it has none.
    pub field: &'static str,
    pub kind: Kind,
    /// litelet's default, as flag text; empty when there is none (or it is empty).
    pub default: &'static str,
    /// What it does in litelet (for help, the man page and the table).
    pub doc: &'static str,
    pub stance: Stance,
    /// The flag is litelet's own: upstream's kubelet v1.36 does not have it.
    pub litelet_flag: bool,
    /// The field is litelet's own extension of KubeletConfiguration.
    pub litelet_field: bool,
    pub deprecation: Deprecation,
    /// Upstream's defaulting reads the field's Go zero value (`0`, `0s`, `""`) as "not
    /// set" (plain fields, not pointers): such a value leaves litelet's default.
    pub zero_is_unset: bool,
    /// The `Flags` field, for implemented settings.
    pub access: Option<Access>,
}

impl Setting {
    fn new(flag: &'static str, field: &'static str, kind: Kind, stance: Stance) -> Setting {
        Setting {
            flag,
            short: None,
            field,
            kind,
            default: "",
            doc: "",
            stance,
            litelet_flag: false,
            litelet_field: false,
            deprecation: if field.is_empty() || flag.is_empty() {
                Deprecation::None
            } else {
                Deprecation::UseConfigFile
            },
            zero_is_unset: false,
            access: None,
        }
    }

    /// A setting litelet implements into a `Flags` field.
    pub fn implemented(
        flag: &'static str,
        field: &'static str,
        default: &'static str,
        access: Access,
        doc: &'static str,
    ) -> Setting {
        let mut s = Setting::new(flag, field, access.kind, Stance::Implemented);
        s.default = default;
        s.doc = doc;
        s.access = Some(access);
        s
    }

    /// A flag the command-line reader acts on itself (`--help`, `--version`).
    pub fn command_line(flag: &'static str, doc: &'static str) -> Setting {
        let mut s = Setting::new(flag, "", Kind::Bool, Stance::Implemented);
        s.doc = doc;
        s
    }

    /// An upstream setting litelet has a fixed behaviour for: `values` accepted (the
    /// first one is litelet's), anything else refused with `why`.
    pub fn fixed(
        flag: &'static str,
        field: &'static str,
        kind: Kind,
        values: &'static [&'static str],
        why: &'static str,
    ) -> Setting {
        Setting::new(flag, field, kind, Stance::Fixed { values, why })
    }

    /// An upstream setting that changes nothing (`why`), accepted at any value.
    pub fn ignored(
        flag: &'static str,
        field: &'static str,
        kind: Kind,
        why: &'static str,
    ) -> Setting {
        Setting::new(flag, field, kind, Stance::Ignored(why))
    }

    /// The setting's kind is `kind`, not its Rust type's usual one.
    pub fn kind(mut self, kind: Kind) -> Setting {
        self.kind = kind;
        self
    }

    /// The flag is litelet's own (upstream's kubelet would not know it).
    pub fn litelet_flag(mut self) -> Setting {
        self.litelet_flag = true;
        self.deprecation = Deprecation::None;
        self
    }

    /// The config field is litelet's own extension.
    pub fn litelet_field(mut self) -> Setting {
        self.litelet_field = true;
        self.deprecation = Deprecation::None;
        self
    }

    /// See [`Setting::zero_is_unset`].
    pub fn zero_is_unset(mut self) -> Setting {
        self.zero_is_unset = true;
        self
    }

    pub fn deprecated(mut self, deprecation: Deprecation) -> Setting {
        self.deprecation = deprecation;
        self
    }

    pub fn short(mut self, letter: char) -> Setting {
        self.short = Some(letter);
        self
    }

    /// Writes `json` into `flags` (implemented settings; others keep nothing).
    pub fn apply(&self, flags: &mut Flags, json: &Value) -> Result<(), ValueError> {
        match &self.access {
            Some(access) => (access.apply)(flags, json),
            None => Ok(()),
        }
    }

    /// What `/configz` shows: the value in `flags`, or litelet's fixed behaviour;
    /// `None` for settings that change nothing.
    pub fn show(&self, flags: &Flags) -> Option<Value> {
        match (&self.access, self.stance) {
            (Some(access), _) => Some((access.show)(flags)),
            (None, Stance::Fixed { values, .. }) => serde_json::from_str(values[0]).ok(),
            (None, _) => None,
        }
    }

    /// The flag as written on a command line (`--max-pods`), or the field's name.
    pub fn name(&self) -> String {
        if self.flag.is_empty() {
            self.field.to_owned()
        } else {
            format!("--{}", self.flag)
        }
    }

    /// The flag and the field, for messages: `--max-pods (maxPods)`.
    pub fn names(&self) -> String {
        match (self.flag.is_empty(), self.field.is_empty()) {
            (false, false) => format!("--{} ({})", self.flag, self.field),
            (false, true) => format!("--{}", self.flag),
            _ => self.field.to_owned(),
        }
    }
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Setting({})", self.names())
    }
}
