//! The short-lived commands an operator runs on a node: `list`, `status` and
//! `teardown`. Each reads or removes the pinned state; none needs the agent.
//! And `install-keys`, which the webhook puts into SSH pods, and
//! `known-hosts`, the line users trust jobs' host certificates with.

pub mod install_keys;
pub mod known_hosts;
pub mod list;
mod output;
pub mod status;
pub mod teardown;

pub use output::Output;
