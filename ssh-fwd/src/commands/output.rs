//! `-o table|json|yaml`, the same for every command that prints state.

use serde::Serialize;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// Prints `value` in `format`; `table` renders it for people.
pub fn print<T: Serialize>(
    format: Output,
    value: &T,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    let text = match format {
        Output::Table => table(value),
        Output::Json => serde_json::to_string_pretty(value)? + "\n",
        Output::Yaml => serde_saphyr::to_string(value)?,
    };
    print!("{text}");
    Ok(())
}
