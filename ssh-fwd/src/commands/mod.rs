//! The short-lived commands an operator runs on a node: `list`, `status` and
//! `teardown`. Each reads or removes the pinned state; none needs the agent.

pub mod list;
mod output;
pub mod status;
pub mod teardown;

pub use output::Output;
