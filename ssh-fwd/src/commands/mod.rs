//! The short-lived commands an operator runs on a node: `list`, `status` and
//! `teardown`. Each reads or removes the pinned state; none needs the agent.
//! And `install-keys`, which the webhook puts into SSH pods.

pub mod install_keys;
pub mod list;
mod output;
pub mod status;
pub mod teardown;

pub use output::Output;
