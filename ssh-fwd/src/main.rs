//! `ssh-fwd`: see `ssh-fwd --help`.

mod agent;
mod attach;
mod cli;
mod controller;
mod dataplane;
mod http_probe;
mod iface;
mod k8s;
mod links;
mod list;
mod loader;
mod logging;
mod mappings;
mod pins;
mod plan;
mod preflight;
mod teardown;

#[cfg(test)]
mod deploy_tests;
#[cfg(test)]
mod prog_tests;

use clap::Parser as _;

use cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Agent(_) | Command::Controller(_)) {
        // `ssh-fwd list | head` should end quietly, as other CLI tools do.
        // SAFETY: restoring the default disposition of a signal is always sound.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if let Err(e) = logging::init(&cli.log, cli.log_format) {
        eprintln!("error: {e:#}");
        return std::process::ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Agent(args) => block_on(agent::run(args)),
        Command::Controller(args) => block_on(controller::run(args)),
        Command::List(args) => list::run(args),
        Command::Teardown(args) => teardown::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs a long-lived command on a small runtime: two workers are plenty for
/// watchers, a reconcile loop and a metrics endpoint.
fn block_on(command: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(command)
}
