//! The test bed for ssh-fwd: network namespaces wired as client -> node ->
//! pod, a real OpenSSH server in each pod, the real agent binary in each node,
//! and guards that remove all of it when dropped, also when a test fails.
//!
//! Used by the end-to-end tests in `tests/`, by `cargo xtask demo`, and by
//! `cargo xtask image` (the container image, `image.rs`).

pub mod agent;
pub mod bird;
pub mod cgroup;
pub mod cluster;
pub mod cmd;
pub mod config_volume;
pub mod container;
pub mod fake_api;
pub mod flood;
pub mod forge;
pub mod grant;
pub mod handshakes;
pub mod image;
pub mod leftovers;
pub mod manifest;
pub mod netns;
pub mod privilege;
pub mod prometheus;
pub mod segment;
pub mod soak;
pub mod ssh;
pub mod topology;

pub use agent::{Agent, Bpffs};
pub use cgroup::TestCgroup;
pub use netns::NetNs;
pub use ssh::{SshClient, Sshd};
pub use topology::{Node, Pod, Topology};
