//! `ssh-fwd`: see `ssh-fwd --help`.

use clap::{CommandFactory as _, Parser as _};
use ssh_fwd::{
    agent,
    cli::{self, Cli, Command},
    commands, controller,
    telemetry::logging::{self, LogFormat},
};

fn main() -> std::process::ExitCode {
    let argv = std::env::args_os().collect();
    let expanded =
        cli::config_file::expand_noting(&Cli::command(), argv, |name| std::env::var_os(name));
    let (argv, deprecated) = match expanded {
        Ok(expanded) => expanded,
        Err(e) => {
            let format = cli::log_format_in(std::env::args_os()).unwrap_or(LogFormat::Text);
            logging::early_error(format, &e.to_string());
            return std::process::ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => usage_error(&e),
    };
    if !matches!(cli.command, Command::Agent(_) | Command::Controller(_)) {
        // `ssh-fwd list | head` should end quietly, as other CLI tools do.
        // SAFETY: restoring the default disposition of a signal is always sound.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if let Err(e) = logging::init(&cli.log, cli.log_format) {
        logging::early_error(cli.log_format, &format!("{e:#}"));
        return std::process::ExitCode::from(2);
    }
    // Old names of renamed flags: once each, at start.
    for note in &deprecated {
        tracing::warn!("{note}");
    }
    let long_running = matches!(cli.command, Command::Agent(_) | Command::Controller(_));
    let format = cli.log_format;
    let result = match cli.command {
        Command::Agent(args) => block_on(agent::run(*args)),
        Command::Controller(args) => block_on(controller::run(*args)),
        Command::List(args) => commands::list::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Teardown(args) => commands::teardown::run(args),
        Command::Config(args) => cli::config_check::run(args),
        Command::InstallKeys(args) => commands::install_keys::run(args),
        Command::KnownHosts(args) => block_on(commands::known_hosts::run(args)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Once: the agent and the controller log it (one event, in the
            // log format asked for); the commands print it, as CLIs do,
            // unless JSON is asked for, where every line is one event.
            if long_running || format == LogFormat::Json {
                tracing::error!("{e:#}");
            } else {
                eprintln!("error: {e:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// A command line clap refused (or `--help`, `--version`): clap prints it
/// and exits, except that an error is one JSON event when the command line
/// asks for `--log-format json`.
fn usage_error(e: &clap::Error) -> ! {
    if e.use_stderr() && cli::log_format_in(std::env::args_os()) == Some(LogFormat::Json) {
        let text = e.render().to_string();
        let text = text.strip_prefix("error: ").unwrap_or(&text);
        logging::early_error(LogFormat::Json, text.trim_end());
        std::process::exit(e.exit_code());
    }
    e.exit()
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
