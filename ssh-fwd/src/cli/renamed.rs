//! Flags renamed because their old names were easily confused
//! (`--service-style` with `--service-styles`, `--iface` with
//! `--pod-ifaces`). The old names keep working, hidden from `--help`: as
//! aliases on the command line and as keys of the configuration file, each
//! used one told once at start (and by `config check`) with the name to use
//! instead.

use std::ffi::OsString;

/// One flag's old name and its new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    pub old: &'static str,
    pub new: &'static str,
}

/// Every renamed flag, by its long names without the dashes.
pub const RENAMED: [Renamed; 4] = [
    // The controller: how the Services it creates expose the SSH IP.
    Renamed {
        old: "service-style",
        new: "expose-as",
    },
    // The agent and the controller: the Service shapes whose SSH IP they
    // honour.
    Renamed {
        old: "service-styles",
        new: "honour-styles",
    },
    // The agent: the interfaces clients reach the node on.
    Renamed {
        old: "iface",
        new: "external-iface",
    },
    // The agent: the reply program on the host end of pods' interfaces.
    Renamed {
        old: "pod-ifaces",
        new: "pod-iface-reply",
    },
];

/// The new name of `old`, if it is a renamed flag's old name.
pub fn renamed(old: &str) -> Option<Renamed> {
    RENAMED.into_iter().find(|r| r.old == old)
}

impl Renamed {
    /// What is said of the flag's old name on the command line.
    pub fn on_command_line(self) -> String {
        format!(
            "--{} is deprecated: it is --{} now (the old name still works)",
            self.old, self.new
        )
    }

    /// What is said of the old name as a key of the configuration at
    /// `path`.
    pub fn in_config(self, path: &std::path::Path) -> String {
        format!(
            "{}: the key `{}` is deprecated: it is `{}` now (the old key still works)",
            path.display(),
            self.old,
            self.new
        )
    }
}

/// The renamed flags `given` (a command's words after its name) sets by an
/// old name, each once, in the order of [`RENAMED`]; `--` ends the flags.
pub fn on_command_line(given: &[OsString]) -> Vec<Renamed> {
    let mut used: Vec<Renamed> = Vec::new();
    for word in given.iter().map(|w| w.to_string_lossy()) {
        if word == "--" {
            break;
        }
        let Some(long) = word.strip_prefix("--") else {
            continue;
        };
        let name = long.split_once('=').map_or(long, |(name, _)| name);
        if let Some(r) = renamed(name)
            && !used.contains(&r)
        {
            used.push(r);
        }
    }
    used.sort_by_key(|r| RENAMED.iter().position(|x| x == r));
    used
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;
    use crate::cli::Cli;

    #[test]
    fn every_old_name_is_a_hidden_alias_of_its_new_name() {
        let cli = Cli::command();
        for r in RENAMED {
            let mut found = 0;
            for command in cli.get_subcommands() {
                for arg in command.get_arguments() {
                    let aliases = arg.get_all_aliases().unwrap_or_default();
                    if aliases.contains(&r.old) {
                        assert_eq!(arg.get_long(), Some(r.new), "{}", command.get_name());
                        let visible = arg.get_visible_aliases().unwrap_or_default();
                        assert!(!visible.contains(&r.old), "hidden from --help");
                        found += 1;
                    }
                    assert_ne!(arg.get_long(), Some(r.old), "{} is still a name", r.old);
                }
            }
            assert!(found >= 1, "{} is an alias of no flag", r.old);
        }
    }

    #[test]
    fn old_names_on_the_command_line_are_found_once_each() {
        let given: Vec<OsString> = [
            "--iface",
            "eth0",
            "--iface=eth1",
            "--service-styles=loadbalancer",
            "--iface-wait",
            "5s",
            "--",
            "--pod-ifaces",
        ]
        .map(Into::into)
        .to_vec();
        let used = on_command_line(&given);
        assert_eq!(
            used.iter().map(|r| r.old).collect::<Vec<_>>(),
            ["service-styles", "iface"]
        );
        assert_eq!(
            used[1].on_command_line(),
            "--iface is deprecated: it is --external-iface now (the old name still works)"
        );
    }
}
