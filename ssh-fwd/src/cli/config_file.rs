//! `--config FILE`: the flags of `ssh-fwd agent` and `ssh-fwd controller`
//! from one YAML file whose keys are the flag names (`port-range: 9000-9999`,
//! `external-iface: [eno1, eno2]`, `kubernetes: true`), the way Cilium reads its
//! ConfigMap. One file serves both commands: each takes the keys that are
//! its flags, and a key that is neither's is refused with the nearest name.
//!
//! The file may also be a directory in Cilium's config-dir convention,
//! which is what a ConfigMap mounted as a volume is: each regular file is
//! named after a flag and holds its value, read as the YAML value the
//! file form takes (`true`, `[eno1, eno2]`, `20000-27999`). Names that
//! begin with `.` are skipped: the kubelet writes its `..data` and
//! `..2026_...` entries there beside the keys.
//!
//! What wins, first to last: a flag on the command line, its environment
//! variable, the file, the default. The file's settings become flags put
//! in front of the command line's, so clap checks them as it checks any
//! flag, and a setting the command line or the environment gives is not
//! taken from the file at all (a repeatable flag is replaced, not added
//! to).

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::{OsStr, OsString},
    path::{Path, PathBuf},
};

use clap::{Arg, ArgAction, Command};

use super::renamed::{self, RENAMED, Renamed};

pub use crate::args::CONFIG_ENV as ENV;
/// The commands that read the file.
pub const COMMANDS: [&str; 2] = ["agent", "controller"];

/// A file that cannot be used, or a key or value in it that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the configuration file {path} is not YAML mapping flag names to values (like `port-range: 9000-9999`): {reason}"
    )]
    Parse { path: PathBuf, reason: String },
    #[error(
        "{path}: `{key}`: not a YAML value (a file of a configuration directory holds one value, like `9000-9999` or `[eno1, eno2]`): {reason}"
    )]
    Entry {
        path: PathBuf,
        key: String,
        reason: String,
    },
    #[error("{path}: `{key}` is not a setting of ssh-fwd agent or controller{hint}")]
    Unknown {
        path: PathBuf,
        key: String,
        hint: String,
    },
    #[error("{path}: `{key}`: {reason}")]
    Value {
        path: PathBuf,
        key: String,
        reason: String,
    },
}

/// A YAML value as a flag takes it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
enum Value {
    Bool(bool),
    Integer(i64),
    Float(f64),
    Text(String),
    List(Vec<Scalar>),
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
enum Scalar {
    Bool(bool),
    Integer(i64),
    Float(f64),
    Text(String),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Self::Bool(b) => b.to_string(),
            Self::Integer(n) => n.to_string(),
            Self::Float(x) => x.to_string(),
            Self::Text(s) => s.clone(),
        }
    }
}

/// A configuration file or directory, read.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    keys: BTreeMap<String, Value>,
    /// The renamed flags whose old names were keys, now under their new.
    renamed: Vec<Renamed>,
}

impl ConfigFile {
    /// Reads `path`: a YAML file, or a directory of one file per key.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        if path.is_dir() {
            return Self::read_dir(path);
        }
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let parse = |reason: String| ConfigError::Parse {
            path: path.to_owned(),
            reason,
        };
        let keys = if text.trim().is_empty() {
            BTreeMap::new()
        } else {
            yaml::<Option<BTreeMap<String, Value>>>(text)
                .map_err(|e| parse(e.to_string()))?
                .unwrap_or_default()
        };
        Self::with_keys(path, keys)
    }

    /// The keys read from `path`, each old name of a renamed flag taken as
    /// its new one (and noted); both names at once are refused.
    fn with_keys(path: &Path, mut keys: BTreeMap<String, Value>) -> Result<Self, ConfigError> {
        let mut renamed = Vec::new();
        for r in RENAMED {
            let Some(value) = keys.remove(r.old) else {
                continue;
            };
            if keys.contains_key(r.new) {
                return Err(ConfigError::Value {
                    path: path.to_owned(),
                    key: r.old.to_owned(),
                    reason: format!(
                        "is the old name of `{}`, which is given too: keep `{}`",
                        r.new, r.new
                    ),
                });
            }
            keys.insert(r.new.to_owned(), value);
            renamed.push(r);
        }
        Ok(Self {
            path: path.to_owned(),
            keys,
            renamed,
        })
    }

    /// What is said of the old names among the keys: one line each.
    pub fn deprecated(&self) -> Vec<String> {
        self.renamed
            .iter()
            .map(|r| r.in_config(&self.path))
            .collect()
    }

    /// A directory of one file per key, as the kubelet mounts a ConfigMap:
    /// a key is a symbolic link into `..data`, followed here.
    fn read_dir(dir: &Path) -> Result<Self, ConfigError> {
        let read = |path: &Path, source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let mut keys = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(|e| read(dir, e))? {
            let entry = entry.map_err(|e| read(dir, e))?;
            let name = entry.file_name();
            let Some(key) = name.to_str() else {
                return Err(ConfigError::Unknown {
                    path: dir.to_owned(),
                    key: name.to_string_lossy().into_owned(),
                    hint: " (a key is a flag name, in ASCII)".to_owned(),
                });
            };
            let path = entry.path();
            if key.starts_with('.') || !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| read(&path, e))?;
            keys.insert(key.to_owned(), Self::entry(dir, key, &text)?);
        }
        Self::with_keys(dir, keys)
    }

    /// One file's value: the YAML value `key: TEXT` would give, its
    /// trailing newline trimmed; an empty file is an empty text.
    fn entry(dir: &Path, key: &str, text: &str) -> Result<Value, ConfigError> {
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            return Ok(Value::Text(String::new()));
        }
        yaml::<Value>(text).map_err(|e| ConfigError::Entry {
            path: dir.to_owned(),
            key: key.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Refuses a key that no command takes, naming the nearest that one
    /// does.
    pub fn check_keys(&self, cli: &Command) -> Result<(), ConfigError> {
        let known = known_names(cli);
        for key in self.keys.keys() {
            if !known.contains(key.as_str()) {
                return Err(ConfigError::Unknown {
                    path: self.path.clone(),
                    key: key.clone(),
                    hint: hint(key, known.iter().copied()),
                });
            }
        }
        Ok(())
    }

    /// The flags this file gives `command` (a subcommand of `cli`), but
    /// those that `given` (the command line after the subcommand's name)
    /// already has or whose environment variable `env` says is set.
    pub fn flags_for(
        &self,
        cli: &Command,
        command: &str,
        given: &[OsString],
        env: impl Fn(&str) -> bool,
    ) -> Result<Vec<OsString>, ConfigError> {
        let Some(sub) = cli.find_subcommand(command) else {
            return Ok(Vec::new());
        };
        let args: Vec<&Arg> = sub
            .get_arguments()
            .chain(cli.get_arguments().filter(|a| a.is_global_set()))
            .collect();
        let mut flags = Vec::new();
        for (key, value) in &self.keys {
            let Some(arg) = args.iter().find(|a| a.get_long() == Some(key.as_str())) else {
                continue;
            };
            if on_command_line(arg, given)
                || arg.get_env().and_then(OsStr::to_str).is_some_and(&env)
            {
                continue;
            }
            flags.extend(self.flag(key, arg, value)?);
        }
        Ok(flags)
    }

    /// Checks every value this file gives `command` with the flag's own
    /// parser, one key at a time, so an error names the key; returns how
    /// many keys are the command's.
    pub fn check_values(&self, cli: &Command, command: &str) -> Result<usize, ConfigError> {
        use clap::error::ErrorKind;
        let Some(sub) = cli.find_subcommand(command) else {
            return Ok(0);
        };
        let mut taken = 0;
        for (key, value) in &self.keys {
            let Some(arg) = sub
                .get_arguments()
                .chain(cli.get_arguments().filter(|a| a.is_global_set()))
                .find(|a| a.get_long() == Some(key.as_str()))
            else {
                continue;
            };
            taken += 1;
            let argv = ["ssh-fwd", command]
                .into_iter()
                .map(OsString::from)
                .chain(self.flag(key, arg, value)?);
            // A value is parsed as the flag is read, before clap looks at
            // what else is missing or conflicts: those are the whole
            // configuration's to say.
            if let Err(e) = cli.clone().try_get_matches_from(argv)
                && matches!(
                    e.kind(),
                    ErrorKind::InvalidValue
                        | ErrorKind::ValueValidation
                        | ErrorKind::WrongNumberOfValues
                        | ErrorKind::TooManyValues
                        | ErrorKind::TooFewValues
                        | ErrorKind::InvalidUtf8
                )
            {
                return Err(self.value_error(key, &e));
            }
        }
        Ok(taken)
    }

    /// The command-line words for `key: value`.
    fn flag(&self, key: &str, arg: &Arg, value: &Value) -> Result<Vec<OsString>, ConfigError> {
        let name = OsString::from(format!("--{key}"));
        let wrong = |reason: String| ConfigError::Value {
            path: self.path.clone(),
            key: key.to_owned(),
            reason,
        };
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            return match value {
                Value::Bool(true) => Ok(vec![name]),
                Value::Bool(false) => Ok(Vec::new()),
                _ => Err(wrong("is a switch: write `true` or `false`".to_owned())),
            };
        }
        let repeatable = matches!(arg.get_action(), ArgAction::Append);
        let values: Vec<String> = match value {
            Value::List(items) if repeatable => items.iter().map(Scalar::text).collect(),
            Value::List(items) => match arg.get_value_delimiter() {
                Some(delimiter) => vec![
                    items
                        .iter()
                        .map(Scalar::text)
                        .collect::<Vec<_>>()
                        .join(&delimiter.to_string()),
                ],
                None => {
                    return Err(wrong(
                        "takes one value, not a list (write `key: value`)".to_owned(),
                    ));
                }
            },
            Value::Bool(b) => vec![b.to_string()],
            Value::Integer(n) => vec![n.to_string()],
            Value::Float(x) => vec![x.to_string()],
            Value::Text(s) => vec![s.clone()],
        };
        // `--key=value`: a value that starts with a dash stays a value.
        Ok(values
            .into_iter()
            .map(|v| OsString::from(format!("--{key}={v}")))
            .collect())
    }

    fn value_error(&self, key: &str, e: &clap::Error) -> ConfigError {
        let text = e.render().to_string();
        let reason = text
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        ConfigError::Value {
            path: self.path.clone(),
            key: key.to_owned(),
            reason,
        }
    }
}

/// `text` as YAML 1.2 reads it: only `true` and `false` are booleans, so
/// `off`, `on`, `yes` and `no` stay the words that flags such as
/// `--hairpin` and `--announce` take (YAML 1.1 would make them `false`).
fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { strict_booleans: true })
}

/// Every flag a command that reads the file has, by its long name.
fn known_names(cli: &Command) -> BTreeSet<&str> {
    COMMANDS
        .iter()
        .filter_map(|name| cli.find_subcommand(name))
        .flat_map(Command::get_arguments)
        .chain(cli.get_arguments().filter(|a| a.is_global_set()))
        .filter_map(Arg::get_long)
        .filter(|long| !matches!(*long, "help" | "version" | "config"))
        .collect()
}

/// The nearest known name to `key`, as a hint for the message.
fn hint<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> String {
    if key == "config" {
        return " (a configuration file cannot name another)".to_owned();
    }
    let bare = key.trim_start_matches('-').replace('_', "-").to_lowercase();
    let nearest = known
        .map(|name| (strsim::jaro_winkler(&bare, name), name))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match nearest {
        Some((score, name)) if score >= 0.85 => format!(
            " (did you mean `{name}`? Keys are the flag names without the dashes)"
        ),
        _ => " (keys are the flag names without the dashes: see `ssh-fwd agent --help` and `ssh-fwd controller --help`)".to_owned(),
    }
}

/// `argv` with the flags of the file named by `--config` (or
/// [`ENV`], through `env`) put in after the command's name: what clap then
/// parses. A command line of another command, or with no file, is
/// returned as it is.
pub fn expand(
    cli: &Command,
    argv: Vec<OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Vec<OsString>, ConfigError> {
    expand_noting(cli, argv, env).map(|(argv, _)| argv)
}

/// [`expand`], and what is to be said at start of the old names of
/// renamed flags that the command line or the file uses (one line each).
pub fn expand_noting(
    cli: &Command,
    argv: Vec<OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<(Vec<OsString>, Vec<String>), ConfigError> {
    let Some(at) = command_at(&argv) else {
        return Ok((argv, Vec::new()));
    };
    let given = &argv[at + 1..];
    let mut notes: Vec<String> = (renamed::on_command_line(given).into_iter())
        .map(Renamed::on_command_line)
        .collect();
    let named = file_named(given).or_else(|| env(ENV).filter(|v| !v.is_empty()));
    let Some(path) = named else {
        return Ok((argv, notes));
    };
    let file = ConfigFile::read(Path::new(&path))?;
    file.check_keys(cli)?;
    let command = argv[at].to_string_lossy().into_owned();
    let set = |name: &str| env(name).is_some_and(|v| !v.is_empty());
    let flags = file.flags_for(cli, &command, given, set)?;
    notes.extend(file.deprecated());
    let mut out = argv[..=at].to_vec();
    out.extend(flags);
    out.extend_from_slice(given);
    Ok((out, notes))
}

/// Where the command's name is in `argv` (after the program's name and
/// the global flags), if it is one that reads the file.
fn command_at(argv: &[OsString]) -> Option<usize> {
    let mut words = argv.iter().enumerate().skip(1);
    while let Some((i, word)) = words.next() {
        let word = word.to_str()?;
        match word {
            "--log" | "--log-format" => {
                words.next();
            }
            _ if word.starts_with('-') => {}
            _ => return COMMANDS.contains(&word).then_some(i),
        }
    }
    None
}

/// The value of `--config` in `given`.
fn file_named(given: &[OsString]) -> Option<OsString> {
    let mut words = given.iter();
    while let Some(word) = words.next() {
        match word.to_str() {
            Some("--") => return None,
            Some("--config") => return words.next().cloned(),
            Some(w) if w.starts_with("--config=") => {
                return Some(OsString::from(&w["--config=".len()..]));
            }
            _ => {}
        }
    }
    None
}

/// Whether `given` sets `arg` (by its long name, an alias or its short
/// name; `--` ends the flags).
fn on_command_line(arg: &Arg, given: &[OsString]) -> bool {
    let longs: Vec<&str> = arg
        .get_long()
        .into_iter()
        .chain(arg.get_all_aliases().unwrap_or_default())
        .collect();
    let shorts: Vec<char> = arg
        .get_short()
        .into_iter()
        .chain(arg.get_all_short_aliases().unwrap_or_default())
        .collect();
    for word in given.iter().map(|w| w.to_string_lossy()) {
        if word == "--" {
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            let name = long.split_once('=').map_or(long, |(name, _)| name);
            if longs.contains(&name) {
                return true;
            }
        } else if let Some(short) = word.strip_prefix('-')
            && short.chars().next().is_some_and(|c| shorts.contains(&c))
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests;
