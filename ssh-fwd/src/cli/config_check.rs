//! `ssh-fwd config check PATH`: a configuration file (or directory)
//! checked as the agent and the controller would read it, without starting
//! either.

use std::path::PathBuf;

use clap::CommandFactory as _;

use super::{
    Cli,
    config_file::{COMMANDS, ConfigFile},
};
use crate::controller;

#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub action: ConfigAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// Check every key (a flag name of `ssh-fwd agent` or `ssh-fwd
    /// controller`) and every value with that flag's own parser, then each
    /// command's whole configuration as it would start with only the file
    /// (settings the file leaves to the command line are listed). Exits 1
    /// on the first error, naming the key and the fix.
    Check {
        /// The YAML file, or a directory of one file per key (a mounted
        /// ConfigMap).
        #[arg(value_name = "PATH")]
        file: PathBuf,
    },
}

pub fn run(args: ConfigArgs) -> anyhow::Result<()> {
    let ConfigAction::Check { file } = args.action;
    print!("{}", check(&file)?);
    Ok(())
}

/// The report for a good file; the first error of a bad one.
pub fn check(path: &std::path::Path) -> anyhow::Result<String> {
    let cli = Cli::command();
    let file = ConfigFile::read(path)?;
    file.check_keys(&cli)?;
    let mut report = String::new();
    for line in file.deprecated() {
        report.push_str(&format!("{line}\n"));
    }
    for command in COMMANDS {
        let taken = file.check_values(&cli, command)?;
        let flags = file.flags_for(&cli, command, &[], |_| false)?;
        let argv = ["ssh-fwd", command]
            .into_iter()
            .map(Into::into)
            .chain(flags);
        let line = match Cli::command().try_get_matches_from(argv) {
            Ok(matches) => match whole(command, &matches) {
                Some(e) => anyhow::bail!("{}: {command}: {e}", path.display()),
                None => "ok".to_owned(),
            },
            Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => format!(
                "ok; still to come from the command line or the environment: {}",
                missing(&e)
            ),
            Err(e) => anyhow::bail!("{}: {command}: {}", path.display(), first_line(&e)),
        };
        report.push_str(&format!(
            "{command}: {taken} settings from the file: {line}\n"
        ));
    }
    Ok(format!("{}: good\n{report}", path.display()))
}

/// The checks a command makes of its flags together, past clap's.
fn whole(command: &str, matches: &clap::ArgMatches) -> Option<String> {
    use clap::FromArgMatches as _;
    let cli = Cli::from_arg_matches(matches).ok()?;
    match (command, cli.command) {
        ("controller", crate::cli::Command::Controller(args)) => {
            controller::args::check(&args).err().map(|e| e.to_string())
        }
        _ => None,
    }
}

fn missing(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::Strings(args)) => args.join(", "),
        _ => first_line(e),
    }
}

fn first_line(e: &clap::Error) -> String {
    e.render()
        .to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(text: &str) -> Result<String, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ssh-fwd.yaml");
        std::fs::write(&path, text).unwrap();
        check(&path).map_err(|e| format!("{e:#}"))
    }

    const GOOD: &str = "\
ssh-ip: [198.18.0.10, 2001:db8::10]
port-range: 9000-9999
external-iface: [eno1]
kubernetes: true
ssh-hostname: ssh.example.org
resync-interval: 30s
provisional-cap: 16
honour-styles: [loadbalancer, externalips]
";

    #[test]
    fn a_good_file_is_good_for_both_commands() {
        let report = checked(GOOD).unwrap();
        assert!(report.contains(": good\n"), "{report}");
        assert!(
            report.contains("agent: 6 settings from the file: ok\n"),
            "{report}"
        );
        assert!(
            report.contains("controller: 6 settings from the file: ok\n"),
            "{report}"
        );
    }

    #[test]
    fn what_the_file_leaves_to_the_command_line_is_listed() {
        let report = checked("port-range: 9000-9999\n").unwrap();
        assert!(
            report.contains("controller: 1 settings from the file: ok; still to come from the command line or the environment: --ssh-ip <IP>"),
            "{report}"
        );
    }

    /// One bad value of each kind of setting, and what the error says.
    #[test]
    fn every_kind_of_bad_value_names_its_key() {
        for (line, said) in [
            ("kubernetes: maybe", "`kubernetes`: is a switch"),
            (
                "port-range: 9000-80",
                "`port-range`: invalid value '9000-80'",
            ),
            (
                "resync-interval: 0s",
                "`resync-interval`: invalid value '0s'",
            ),
            ("resync-interval: soon", "is not a duration"),
            (
                "ssh-ip: 198.18.0.300",
                "`ssh-ip`: invalid value '198.18.0.300'",
            ),
            (
                "ssh-ip: [198.18.0.10, nope]",
                "`ssh-ip`: invalid value 'nope'",
            ),
            (
                "expose-as: nodeport",
                "`expose-as`: invalid value 'nodeport'",
            ),
            ("provisional-cap: 0", "`provisional-cap`: invalid value '0'"),
            ("provisional-cap: -3", "`provisional-cap`"),
            (
                "port-range: [9000, 9999]",
                "`port-range`: takes one value, not a list",
            ),
            ("port_range: 9000-9999", "did you mean `port-range`?"),
            (
                "nonsense: 1",
                "`nonsense` is not a setting of ssh-fwd agent or controller",
            ),
            ("ssh-ip: {a: 1}", "is not YAML mapping flag names to values"),
            ("- port-range", "is not YAML mapping flag names to values"),
        ] {
            let err = checked(line).expect_err(line);
            assert!(err.contains(said), "{line}: {err}");
            assert!(err.contains("ssh-fwd.yaml"), "names the file: {err}");
        }
    }

    #[test]
    fn settings_that_cannot_go_together_are_refused_as_the_controller_would() {
        let err =
            checked("ssh-ip: 198.18.0.10\nexpose-as: externalips\nhonour-styles: [loadbalancer]\n")
                .unwrap_err();
        assert!(err.contains("controller:"), "{err}");
        let err = checked("ssh-ip: 198.18.0.10\nssh-user: -oProxyCommand=x\n").unwrap_err();
        assert!(err.contains("controller:"), "{err}");
        let err = checked(
            "mappings: m.yaml\nkubernetes: true\nexternal-iface: [eth0]\nssh-ip: 198.18.0.10\n",
        )
        .unwrap_err();
        assert!(
            err.contains("agent:") && err.contains("--mappings"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_is_checked_as_a_file_with_its_keys() {
        let keys = [("ssh-ip", "198.18.0.10\n"), ("port-range", "9000-9999\n")];
        let dir = crate::cli::config_file::tests::kubelet_volume(&keys);
        let report = check(dir.path()).unwrap();
        assert!(
            report.contains("agent: 2 settings from the file"),
            "{report}"
        );
        let bad = crate::cli::config_file::tests::kubelet_volume(&[("port-range", "9000-80")]);
        let err = format!("{:#}", check(bad.path()).unwrap_err());
        assert!(
            err.contains("`port-range`: invalid value '9000-80'"),
            "{err}"
        );
        assert!(err.contains(&bad.path().display().to_string()), "{err}");
    }

    #[test]
    fn an_old_key_is_good_and_said_to_be_deprecated_with_its_new_name() {
        let report = checked("ssh-ip: 198.18.0.10\nservice-style: loadbalancer\n").unwrap();
        assert!(report.contains(": good\n"), "{report}");
        assert!(
            report.contains(
                "the key `service-style` is deprecated: it is `expose-as` now (the old key still works)"
            ),
            "{report}"
        );
        assert!(
            report.contains("controller: 2 settings from the file: ok"),
            "{report}"
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = check(std::path::Path::new("/nonexistent/ssh-fwd.yaml")).unwrap_err();
        assert!(
            format!("{err:#}")
                .contains("cannot read the configuration file /nonexistent/ssh-fwd.yaml"),
            "{err:#}"
        );
    }
}
