//! The command line: one subcommand per command, each with its flags in its
//! own module (`agent::AgentArgs`, `controller::ControllerArgs`, ...). Doc
//! comments here are the `--help` text.

pub mod config_check;
pub mod config_file;
pub mod renamed;

use std::ffi::OsString;

use clap::{Parser, Subcommand, ValueEnum as _};

use crate::{
    agent::AgentArgs,
    cli::config_check::ConfigArgs,
    commands::{
        install_keys::InstallKeysArgs, known_hosts::KnownHostsArgs, list::ListArgs,
        status::StatusArgs, teardown::TeardownArgs,
    },
    controller::ControllerArgs,
    telemetry::logging::LogFormat,
};

/// eBPF/XDP-accelerated TCP forwarder: lands `ssh -p PORT user@EXTERNAL_IP` in
/// the job pod behind that port, rewriting packets in the kernel (no iptables,
/// no kube-proxy, no userspace copy).
#[derive(Debug, Parser)]
#[command(name = "ssh-fwd", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log filter (RUST_LOG syntax), e.g. `info` or `ssh_fwd=debug`.
    #[arg(long, global = true, env = "SSH_FWD_LOG", default_value = "info")]
    pub log: String,

    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attach the data path to the external interfaces and keep its maps equal
    /// to the desired mappings. SIGHUP reloads; SIGTERM exits and leaves the
    /// data path forwarding (a new agent adopts it).
    // Boxed: its flags are many times the size of the other commands'.
    Agent(Box<AgentArgs>),
    /// Print what is installed, read from the pinned maps: `mappings` (the
    /// default) with their packet and byte counters, `conns`, `hooks` or
    /// `counters`.
    List(ListArgs),
    /// One screen on this node's forwarder: the agent, its source, the hooks,
    /// the mappings, the last reconcile and error, and the packet counters.
    Status(StatusArgs),
    /// Give every pod labelled `ssh-fwd.io/ssh=enabled` an SSH port: create a
    /// Service on the SSH IP that forwards a free port from --port-range to
    /// the pod's port 22, and publish the ready `ssh` command on the pod (an
    /// `ssh-fwd.io/endpoint` annotation and an Event). One replica acts at a
    /// time (leader election with a Lease).
    // Boxed: its flags are many times the size of the other commands'.
    Controller(Box<ControllerArgs>),
    /// Write a pod's authorized_keys from its keys Secret: directory 0700,
    /// file 0600, owned by the job's user; bad lines skipped with a warning.
    /// With --watch, keep it up to date as the Secret changes (the webhook
    /// runs it as an init container and as a native sidecar).
    InstallKeys(InstallKeysArgs),
    /// Print the line to put in ~/.ssh/known_hosts to trust every job's
    /// host certificate (`@cert-authority [HOST]:* ssh-ed25519 ...`), from
    /// the ConfigMap the controller publishes (--host-certs); with
    /// --ssh-config, also an ssh_config block for the host.
    KnownHosts(KnownHostsArgs),
    /// Work with a configuration file or directory (`--config`): `ssh-fwd
    /// config check PATH` checks every key and value as the agent and the
    /// controller would, without starting anything.
    Config(ConfigArgs),
    /// Detach the programs and remove every map and link the agent pinned.
    /// Stop the agent first: a running agent keeps its programs attached.
    Teardown(TeardownArgs),
}

/// `--log-format` as given in `args` (the program's name first), read
/// without clap: to report clap's own errors in that format.
pub fn log_format_in(args: impl IntoIterator<Item = OsString>) -> Option<LogFormat> {
    let mut format = None;
    let mut args = args.into_iter().skip(1);
    while let Some(arg) = args.next() {
        let value = match arg.to_str() {
            Some("--") => break,
            Some("--log-format") => args.next(),
            Some(other) => other.strip_prefix("--log-format=").map(OsString::from),
            None => None,
        };
        if let Some(value) = value {
            format = value
                .to_str()
                .and_then(|v| LogFormat::from_str(v, false).ok());
        }
    }
    format
}

#[cfg(test)]
mod tests {
    use std::{path::PathBuf, time::Duration};

    use super::*;
    use crate::{args::ServiceStyle, datapath::hooks::AttachMode};

    #[test]
    fn documented_agent_command_line_parses() {
        let cli = Cli::try_parse_from([
            "ssh-fwd",
            "agent",
            "--external-iface",
            "eth0",
            "--external-iface",
            "eth1",
            "--mappings",
            "/etc/m.yaml",
        ])
        .unwrap();
        let Command::Agent(a) = cli.command else {
            panic!("not agent")
        };
        assert_eq!(a.ifaces, ["eth0", "eth1"]);
        assert_eq!(a.mappings, Some(PathBuf::from("/etc/m.yaml")));
        assert_eq!(a.attach, AttachMode::Auto);
        assert_eq!(a.bpffs.bpffs, PathBuf::from("/sys/fs/bpf/ssh-fwd"));
    }

    #[test]
    fn kubernetes_mode_needs_ssh_ip_and_excludes_a_mappings_file() {
        let base = ["ssh-fwd", "agent", "--external-iface", "eth0"];
        let ok = Cli::try_parse_from(base.iter().copied().chain([
            "--kubernetes",
            "--ssh-ip",
            "198.18.0.10",
            "--port-range",
            "9000-9100",
        ]))
        .unwrap();
        let Command::Agent(a) = ok.command else {
            panic!("not agent")
        };
        assert_eq!(a.port_range, 9000..=9100);
        assert!(Cli::try_parse_from(base.iter().copied().chain(["--kubernetes"])).is_err());
        assert!(
            Cli::try_parse_from(base.iter().copied().chain([
                "--kubernetes",
                "--ssh-ip",
                "198.18.0.10",
                "--mappings",
                "m.yaml"
            ]))
            .is_err()
        );
        assert!(Cli::try_parse_from(base).is_err(), "one source is required");
    }

    #[test]
    fn documented_controller_command_line_parses_with_defaults() {
        let cli =
            Cli::try_parse_from(["ssh-fwd", "controller", "--ssh-ip", "198.18.0.10"]).unwrap();
        let Command::Controller(c) = cli.command else {
            panic!("not controller")
        };
        assert_eq!(c.port_range, 20000..=27999);
        assert_eq!(c.ssh_user, "ucloud");
        assert_eq!(c.ssh_hostname, None);
        assert_eq!(c.service_style, ServiceStyle::Loadbalancer);
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        let styled = Cli::try_parse_from([
            "ssh-fwd",
            "controller",
            "--ssh-ip",
            "198.18.0.10",
            "--ssh-hostname",
            "ssh.example.org",
            "--expose-as",
            "externalips",
            "--ssh-user",
            "alice",
            "--port-range",
            "9000-9100",
        ])
        .unwrap();
        let Command::Controller(c) = styled.command else {
            panic!("not controller")
        };
        assert_eq!(c.service_style, ServiceStyle::Externalips);
        assert_eq!(c.ssh_hostname.as_deref(), Some("ssh.example.org"));
        assert!(
            Cli::try_parse_from(["ssh-fwd", "controller"]).is_err(),
            "--ssh-ip is required"
        );
    }

    #[test]
    fn the_log_format_is_found_without_clap_wherever_it_is() {
        let format = |args: &[&str]| {
            log_format_in(
                std::iter::once("ssh-fwd")
                    .chain(args.iter().copied())
                    .map(Into::into),
            )
        };
        assert_eq!(
            format(&["--log-format", "json", "agent"]),
            Some(LogFormat::Json)
        );
        assert_eq!(
            format(&["agent", "--bad", "--log-format=json"]),
            Some(LogFormat::Json)
        );
        assert_eq!(format(&["--log-format", "text"]), Some(LogFormat::Text));
        assert_eq!(format(&["--log-format", "yaml"]), None);
        assert_eq!(format(&["--log-format"]), None);
        assert_eq!(format(&["agent", "--", "--log-format", "json"]), None);
        assert_eq!(format(&[]), None);
    }

    #[test]
    fn every_agent_flag_is_under_the_heading_of_its_concern() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let agent = cli.find_subcommand("agent").unwrap();
        let loose: Vec<&str> = agent
            .get_arguments()
            .filter(|a| a.get_help_heading().is_none())
            .filter_map(|a| a.get_long())
            .collect();
        assert!(loose.is_empty(), "flags without a heading: {loose:?}");
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
