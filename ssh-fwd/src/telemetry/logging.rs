//! tracing set-up; `log` records (aya, aya-log) are forwarded into it, and
//! so are panics: with `--log-format json` every line on stderr is one JSON
//! event, whatever went wrong (see also [`early_error`] for what fails
//! before the logger is set up).

use std::{backtrace::BacktraceStatus, ffi::OsString, io::IsTerminal as _};

use tracing_subscriber::{EnvFilter, fmt};

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Sets up the logger with `--log` and `--log-format`, and logs panics
/// through it.
pub fn init(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| anyhow::anyhow!("--log `{filter}` is not a valid filter: {e}"))?;
    install(filter, format)
}

/// Reports an error met before the logger was set up (the command line, a
/// bad `--log`): one JSON event with `--log-format json`, else `error: ...`
/// as command-line tools print it.
pub fn early_error(format: LogFormat, message: &str) {
    if format == LogFormat::Json && install(EnvFilter::new("info"), format).is_ok() {
        tracing::error!("{message}");
    } else {
        eprintln!("error: {message}");
    }
}

fn install(filter: EnvFilter, format: LogFormat) -> anyhow::Result<()> {
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ));
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("installing the logger: {e}"))?;
    std::panic::set_hook(Box::new(log_panic));
    Ok(())
}

/// A panic as one error event: its message, where, on which thread, and
/// the backtrace if `RUST_BACKTRACE` asks for one.
fn log_panic(info: &std::panic::PanicHookInfo<'_>) {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let location = info.location().map(ToString::to_string);
    let thread = std::thread::current();
    let backtrace = std::backtrace::Backtrace::capture();
    let backtrace =
        (backtrace.status() == BacktraceStatus::Captured).then(|| backtrace.to_string());
    tracing::error!(
        thread = thread.name().unwrap_or("unnamed"),
        location,
        backtrace,
        "panicked: {message} (a bug: please report it)"
    );
}

/// Colour codes only for a terminal, and never when `NO_COLOR` is set to
/// anything (no-color.org): log files, journald and `kubectl logs` show
/// escape sequences raw.
fn colour(terminal: bool, no_color: Option<OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
