//! The configuration file and directory as the agent and the controller
//! read them, with the command line and the environment.

use clap::CommandFactory as _;

use super::*;
use crate::cli::{Cli, Command as Run};

const FILE: &str = "\
ssh-ip: 198.18.0.10
port-range: 9000-9999
external-iface: [eno1, eno2]
kubernetes: true
ssh-user: alice
";

fn with(file: &str, argv: &[&str], env: &[(&str, &str)]) -> Result<Cli, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ssh-fwd.yaml");
    std::fs::write(&path, file).unwrap();
    let argv: Vec<OsString> = argv
        .iter()
        .map(|w| OsString::from(w.replace("FILE", path.to_str().unwrap())))
        .collect();
    let env = |name: &str| {
        env.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| OsString::from(v.replace("FILE", path.to_str().unwrap())))
    };
    let argv = expand(&Cli::command(), argv, env).map_err(|e| e.to_string())?;
    Cli::try_parse_from_argv(argv)
}

impl Cli {
    fn try_parse_from_argv(argv: Vec<OsString>) -> Result<Self, String> {
        use clap::Parser as _;
        Self::try_parse_from(argv).map_err(|e| e.to_string())
    }
}

fn agent(cli: Cli) -> Box<crate::agent::AgentArgs> {
    match cli.command {
        Run::Agent(a) => a,
        other => panic!("not the agent: {other:?}"),
    }
}

fn controller(cli: Cli) -> Box<crate::controller::ControllerArgs> {
    match cli.command {
        Run::Controller(c) => c,
        other => panic!("not the controller: {other:?}"),
    }
}

#[test]
fn each_command_takes_its_own_keys_from_one_file() {
    let a = agent(with(FILE, &["ssh-fwd", "agent", "--config", "FILE"], &[]).unwrap());
    assert_eq!(a.ifaces, ["eno1", "eno2"]);
    assert!(a.kubernetes);
    assert_eq!(a.port_range, 9000..=9999);
    let c = controller(with(FILE, &["ssh-fwd", "controller", "--config=FILE"], &[]).unwrap());
    assert_eq!(c.ssh_user, "alice");
    assert_eq!(c.port_range, 9000..=9999);
}

#[test]
fn the_command_line_and_the_environment_win_over_the_file() {
    let argv = [
        "ssh-fwd",
        "--log",
        "debug",
        "agent",
        "--config",
        "FILE",
        "--external-iface",
        "bond0",
        "--port-range=7000-7999",
    ];
    let a = agent(with(FILE, &argv, &[]).unwrap());
    assert_eq!(a.ifaces, ["bond0"], "a repeatable flag is replaced");
    assert_eq!(a.port_range, 7000..=7999);
    // The test's environment, not the process's: the file's key is left
    // out for it, so clap's default shows.
    let file = format!("{FILE}log: debug\n");
    let cli = with(
        &file,
        &["ssh-fwd", "controller"],
        &[(ENV, "FILE"), ("SSH_FWD_LOG", "warn")],
    )
    .unwrap();
    assert_eq!(
        cli.log, "info",
        "the file's log was left to the environment"
    );
    assert_eq!(controller(cli).ssh_user, "alice", "the file named by {ENV}");
}

#[test]
fn switches_lists_and_global_flags() {
    let file = "kubernetes: false\nmappings: /etc/m.yaml\nexternal-iface: eth0\nlog: debug\n";
    let cli = with(file, &["ssh-fwd", "agent", "--config", "FILE"], &[]).unwrap();
    assert_eq!(cli.log, "debug");
    let a = agent(cli);
    assert!(!a.kubernetes);
    assert_eq!(a.ifaces, ["eth0"]);
    let wrong = with(
        "kubernetes: 3\n",
        &["ssh-fwd", "agent", "--config", "FILE"],
        &[],
    );
    assert!(wrong.unwrap_err().contains("`kubernetes`: is a switch"));
    let list = with(
        "port-range: [1, 2]\n",
        &["ssh-fwd", "agent", "--config", "FILE"],
        &[],
    );
    assert!(list.unwrap_err().contains("`port-range`: takes one value"));
}

/// YAML 1.1 reads `off`, `on`, `yes` and `no` as booleans; the flags
/// that take them are not switches (`--hairpin off`, `--announce
/// off`), so they stay words.
#[test]
fn off_and_on_are_the_words_the_flags_take() {
    let file = "hairpin: off\nannounce: off\nkubernetes: true\nexternal-iface: eth0\nssh-ip: 198.18.0.10\n";
    let a = agent(with(file, &["ssh-fwd", "agent", "--config", "FILE"], &[]).unwrap());
    assert_eq!(a.hairpin, crate::datapath::hairpin::HairpinMode::Off);
    assert_eq!(a.announce.announce, crate::agent::AnnounceMode::Off);
    let wrong = with(
        "kubernetes: yes\n",
        &["ssh-fwd", "agent", "--config", "FILE"],
        &[],
    );
    assert!(wrong.unwrap_err().contains("`kubernetes`: is a switch"));
}

#[test]
fn an_old_name_still_works_as_a_flag_and_as_a_key_and_is_noted_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ssh-fwd.yaml");
    std::fs::write(
        &path,
        "iface: [eno1]\npod-ifaces: off\nkubernetes: true\nssh-ip: 198.18.0.10\n",
    )
    .unwrap();
    let argv: Vec<OsString> = ["ssh-fwd", "agent", "--config"]
        .map(OsString::from)
        .into_iter()
        .chain([path.clone().into_os_string()])
        .chain(["--service-styles=loadbalancer", "--iface", "eno2"].map(OsString::from))
        .collect();
    let (argv, notes) = expand_noting(&Cli::command(), argv, |_| None).unwrap();
    assert_eq!(
        notes,
        [
            "--service-styles is deprecated: it is --honour-styles now (the old name still works)"
                .to_owned(),
            "--iface is deprecated: it is --external-iface now (the old name still works)"
                .to_owned(),
            format!(
                "{}: the key `iface` is deprecated: it is `external-iface` now (the old key \
                 still works)",
                path.display()
            ),
            format!(
                "{}: the key `pod-ifaces` is deprecated: it is `pod-iface-reply` now (the \
                 old key still works)",
                path.display()
            ),
        ]
    );
    let a = agent(Cli::try_parse_from_argv(argv).unwrap());
    assert_eq!(
        a.ifaces,
        ["eno2"],
        "the command line's, by its old name, wins"
    );
    assert_eq!(a.pod_ifaces, crate::agent::PodIfacesMode::Off);
    let both = with(
        "iface: eth0\nexternal-iface: eth1\n",
        &["ssh-fwd", "agent", "--config", "FILE"],
        &[],
    );
    assert!(
        both.unwrap_err()
            .contains("`iface`: is the old name of `external-iface`, which is given too"),
    );
}

#[test]
fn an_unknown_key_is_refused_with_the_nearest_name() {
    for (key, said) in [
        ("port_range", "did you mean `port-range`?"),
        ("--ssh-ip", "did you mean `ssh-ip`?"),
        ("portrange", "did you mean `port-range`?"),
        ("config", "a configuration file cannot name another"),
        ("help", "keys are the flag names"),
    ] {
        let file = format!("{key}: x\n");
        let err = with(&file, &["ssh-fwd", "controller", "--config", "FILE"], &[]).unwrap_err();
        assert!(err.contains(&format!("`{key}` is not a setting")), "{err}");
        assert!(err.contains(said), "{key}: {err}");
    }
}

#[test]
fn a_file_that_is_not_a_mapping_is_refused_and_none_leaves_the_command_line_alone() {
    let err = with("- a\n", &["ssh-fwd", "agent", "--config", "FILE"], &[]).unwrap_err();
    assert!(
        err.contains("is not YAML mapping flag names to values"),
        "{err}"
    );
    let argv: Vec<OsString> = ["ssh-fwd", "list", "--config", "x"]
        .map(Into::into)
        .to_vec();
    assert_eq!(
        expand(&Cli::command(), argv.clone(), |_| None).unwrap(),
        argv
    );
    let missing = expand(
        &Cli::command(),
        ["ssh-fwd", "agent", "--config", "/nonexistent/ssh-fwd.yaml"]
            .map(Into::into)
            .to_vec(),
        |_| None,
    )
    .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("cannot read the configuration file /nonexistent/ssh-fwd.yaml")
    );
    let empty = with(
        "",
        &[
            "ssh-fwd",
            "agent",
            "--config",
            "FILE",
            "--external-iface",
            "x",
            "--mappings",
            "m",
        ],
        &[],
    );
    assert!(empty.is_ok(), "an empty file sets nothing");
}

/// `keys` written as the kubelet mounts a ConfigMap: the files in a
/// timestamped directory, `..data` a link to it, each key a link
/// through `..data`.
pub(crate) fn kubelet_volume(keys: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let stamp = dir.path().join("..2026_12_07_10_00_00.123456789");
    std::fs::create_dir(&stamp).unwrap();
    for (key, value) in keys {
        std::fs::write(stamp.join(key), value).unwrap();
        let link = Path::new("..data").join(key);
        std::os::unix::fs::symlink(link, dir.path().join(key)).unwrap();
    }
    std::os::unix::fs::symlink(stamp.file_name().unwrap(), dir.path().join("..data")).unwrap();
    dir
}

fn from_dir(keys: &[(&str, &str)], argv: &[&str]) -> Result<Cli, String> {
    let dir = kubelet_volume(keys);
    let argv: Vec<OsString> = argv
        .iter()
        .map(|w| OsString::from(w.replace("DIR", dir.path().to_str().unwrap())))
        .collect();
    let argv = expand(&Cli::command(), argv, |_| None).map_err(|e| e.to_string())?;
    Cli::try_parse_from_argv(argv)
}

#[test]
fn a_directory_of_one_file_per_key_is_read_as_the_kubelet_mounts_a_configmap() {
    let keys = [
        ("ssh-ip", "198.18.0.10"),
        ("port-range", "20000-27999\n"),
        ("external-iface", "[eno1, eno2]\n"),
        ("kubernetes", "true"),
        ("ssh-user", "alice"),
        ("hairpin", "off\n"),
    ];
    let a = agent(from_dir(&keys, &["ssh-fwd", "agent", "--config", "DIR"]).unwrap());
    assert_eq!(a.ifaces, ["eno1", "eno2"]);
    assert!(a.kubernetes);
    assert_eq!(a.port_range, 20000..=27999);
    let c = controller(
        from_dir(
            &keys,
            &["ssh-fwd", "controller", "--config=DIR", "--ssh-user=bob"],
        )
        .unwrap(),
    );
    assert_eq!(c.ssh_user, "bob", "a flag wins over the directory");
    assert_eq!(
        c.ssh_ips,
        ["198.18.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
}

#[test]
fn a_bad_entry_of_a_directory_names_the_directory_and_the_key() {
    for (key, value, said) in [
        ("kubernetes", "3", "`kubernetes`: is a switch"),
        ("port_range", "9000-9999", "did you mean `port-range`?"),
        (
            "port-range",
            "9000-80",
            "invalid value '9000-80' for '--port-range",
        ),
        (
            "external-iface",
            "[eno1",
            "`external-iface`: not a YAML value",
        ),
    ] {
        let dir = kubelet_volume(&[(key, value)]);
        let argv = ["ssh-fwd", "agent", "--config", dir.path().to_str().unwrap()];
        let argv = argv.map(OsString::from).to_vec();
        let err = expand(&Cli::command(), argv, |_| None)
            .map(|argv| Cli::try_parse_from_argv(argv).unwrap_err())
            .unwrap_or_else(|e| e.to_string());
        let shown = dir.path().display().to_string();
        assert!(err.contains(said), "{key}: {err}");
        if !said.contains("invalid value") {
            assert!(err.contains(&shown), "names the directory: {err}");
        }
    }
}
