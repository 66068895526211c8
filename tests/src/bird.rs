//! BIRD 2 in a test's namespace, as a node's or a router's BGP speaker.
//! Dropping it kills it.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Stdio},
};

use anyhow::Context as _;

use crate::{NetNs, cmd};

pub struct Bird {
    child: Child,
    socket: PathBuf,
}

impl Bird {
    /// Runs `bird` in the foreground inside `ns` with `config`, its files
    /// (configuration, control socket, log) in `dir` named after `name`.
    pub fn start(ns: &NetNs, name: &str, config: &str, dir: &Path) -> anyhow::Result<Self> {
        let conf = dir.join(format!("bird-{name}.conf"));
        let socket = dir.join(format!("bird-{name}.ctl"));
        let log = std::fs::File::create(dir.join(format!("bird-{name}.log")))?;
        std::fs::write(&conf, config)?;
        let child = ns
            .command("bird")
            .arg("-f")
            .arg("-c")
            .arg(&conf)
            .arg("-s")
            .arg(&socket)
            .arg("-P")
            .arg(dir.join(format!("bird-{name}.pid")))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("starting bird (Debian's bird2; `cargo xtask setup` installs it)")?;
        Ok(Self { child, socket })
    }

    /// `birdc show ARGS`, for a failing test's message.
    pub fn show(&self, ns: &NetNs, what: &str) -> String {
        let mut c = ns.command("birdc");
        c.arg("-s")
            .arg(&self.socket)
            .arg("show")
            .args(what.split_whitespace());
        cmd::run(&mut c).unwrap_or_else(|e| format!("{e:#}"))
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        crate::ssh::kill_group(&mut self.child);
    }
}
