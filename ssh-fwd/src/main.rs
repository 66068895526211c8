//! `ssh-fwd`: see `ssh-fwd --help`.

use clap::Parser as _;
use ssh_fwd::{
    agent,
    cli::{Cli, Command},
    commands, controller,
    telemetry::logging,
};

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
    let long_running = matches!(cli.command, Command::Agent(_) | Command::Controller(_));
    let result = match cli.command {
        Command::Agent(args) => block_on(agent::run(*args)),
        Command::Controller(args) => block_on(controller::run(*args)),
        Command::List(args) => commands::list::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Teardown(args) => commands::teardown::run(args),
        Command::InstallKeys(args) => commands::install_keys::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Once: the agent and the controller log it (one event, in the
            // log format asked for); the commands print it, as CLIs do.
            if long_running {
                tracing::error!("{e:#}");
            } else {
                eprintln!("error: {e:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs a long-lived command on a small runtime: two workers are plenty for
/// watchers, a reconcile loop and a metrics endpoint.
fn block_on(command: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    ssh_fwd::telemetry::memory::single_arena();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(command)
}
