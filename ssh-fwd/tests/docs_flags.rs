//! The docs against the binary's CLI: every `--flag` that README.md,
//! deploy/README.md and docs/ name in code is one of ssh-fwd's (or of a
//! tool listed here), and every example value they give a flag
//! (`--activity-interval 0s`) is one the flag's own parser takes.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking, with the error shown"
)]

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::OsStr,
    path::{Path, PathBuf},
};

use clap::CommandFactory as _;
use ssh_fwd::cli::Cli;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Flags of other tools the docs name on their own, with the tool.
const OTHERS: [(&str, &str); 8] = [
    ("release", "cargo build"),
    ("include-ignored", "cargo test"),
    ("runs", "cargo xtask bench"),
    ("before", "cargo xtask bench"),
    ("unlabelled", "cargo xtask bench"),
    ("cap-drop", "podman"),
    ("seccomp-default", "the kubelet"),
    ("admission-control-config-file", "kube-apiserver"),
];

fn documents() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut docs = vec![root.join("README.md"), root.join("deploy/README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension() == Some(OsStr::new("md")))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// The ssh-fwd command lines the text shows, from the first flag or
/// from the word `ssh-fwd` on: inline code that starts with a flag or
/// runs ssh-fwd, and the lines of fenced blocks that run it.
fn code(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            spans.push(line.split(" #").next().unwrap().to_owned());
        } else {
            spans.extend(line.split('`').skip(1).step_by(2).map(str::to_owned));
        }
    }
    spans
        .iter()
        .filter_map(|span| {
            let words: Vec<&str> = span.split_whitespace().collect();
            // ssh-fwd run: the first word, or after `--` (kubectl exec),
            // `sudo` or `exec`; not a name (`-n ssh-fwd`, `-p ssh-fwd`).
            let runs = |i: usize| {
                let w = words[i];
                (w == "ssh-fwd" || w.ends_with("/ssh-fwd"))
                    && (i == 0 || ["--", "sudo", "exec"].contains(&words[i - 1]))
            };
            let from = match words.first() {
                Some(first) if first.starts_with("--") => 0,
                _ => (0..words.len()).find(|i| runs(*i))? + 1,
            };
            Some(words[from..].join(" "))
        })
        .collect()
}

/// A flag and the value an example gives it, from one piece of code:
/// `--name=value`, `--name value`, or `--name` alone.
fn flags(code: &str) -> Vec<(String, Option<String>)> {
    let code = code.replace("/--", " --");
    let words: Vec<&str> = code.split_whitespace().collect();
    let mut found = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let Some(flag) = word.strip_prefix("--") else {
            continue;
        };
        let flag = flag.trim_end_matches([',', ';', ')', '.', ':', '\'', '"']);
        if flag.is_empty() || !flag.starts_with(|c: char| c.is_ascii_lowercase()) {
            continue;
        }
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (
                flag,
                words
                    .get(i + 1)
                    .filter(|w| !w.starts_with('-') && !w.starts_with('[') && !w.starts_with('|'))
                    .map(|w| (*w).to_owned()),
            ),
        };
        found.push((name.to_owned(), value));
    }
    found
}

/// A value that stands for one (`DIR`, `<PORT>`, `$(IFACE)`, `N`...),
/// not an example of one.
fn placeholder(value: &str) -> bool {
    value.is_empty()
        || value.contains(['<', '$', '{', '*', '|', '['])
        || value.contains("...")
        || value.chars().any(|c| c.is_ascii_uppercase())
}

/// Every flag of every ssh-fwd command, by name.
fn cli_flags() -> BTreeMap<String, Vec<(clap::Command, clap::Arg)>> {
    let cli = Cli::command();
    let mut flags: BTreeMap<String, Vec<(clap::Command, clap::Arg)>> = BTreeMap::new();
    let commands = std::iter::once(cli.clone()).chain(cli.get_subcommands().cloned());
    for command in commands {
        for arg in command.get_arguments() {
            let names = arg
                .get_long()
                .into_iter()
                .chain(arg.get_all_aliases().into_iter().flatten());
            for name in names {
                flags
                    .entry(name.to_owned())
                    .or_default()
                    .push((command.clone(), arg.clone()));
            }
        }
    }
    for name in ["help", "version"] {
        flags.entry(name.to_owned()).or_default();
    }
    flags
}

/// Whether `command` takes `value` for `arg`: its parser's verdict,
/// whatever else the command would want.
fn takes_value(command: &clap::Command, arg: &clap::Arg, value: &str) -> bool {
    use clap::error::ErrorKind;
    let alone = command
        .clone()
        .no_binary_name(true)
        .mut_args(|a| a.required(false));
    let long = format!("--{}={value}", arg.get_long().unwrap());
    match alone.try_get_matches_from([long]) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::UnknownArgument
        ),
    }
}

#[test]
fn every_flag_the_docs_name_exists_and_takes_the_values_they_show() {
    let cli = cli_flags();
    let others: BTreeSet<&str> = OTHERS.iter().map(|(flag, _)| *flag).collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(ROOT).unwrap().display().to_string();
        for piece in code(&text) {
            for (flag, value) in flags(&piece) {
                if others.contains(flag.as_str()) {
                    continue;
                }
                let Some(args) = cli.get(&flag) else {
                    wrong.push(format!(
                        "{name}: --{flag} (in `{piece}`) is no flag of ssh-fwd"
                    ));
                    continue;
                };
                checked += 1;
                let Some(value) = value.filter(|v| !placeholder(v)) else {
                    continue;
                };
                let takes = args
                    .iter()
                    .filter(|(_, arg)| arg.get_action().takes_values());
                let mut takes = takes.peekable();
                if takes.peek().is_none() {
                    continue;
                }
                let parses = takes.any(|(command, arg)| takes_value(command, arg, &value));
                if !parses {
                    wrong.push(format!("{name}: `--{flag} {value}` is refused by ssh-fwd"));
                }
            }
        }
    }
    assert!(checked > 100, "{checked} flags checked");
    assert!(
        wrong.is_empty(),
        "the docs disagree with the CLI:\n{}",
        wrong.join("\n")
    );
}
