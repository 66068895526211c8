//! What a running process tells its operator: logs ([`logging`]), and the
//! HTTP endpoints `/metrics`, `/healthz` and `/readyz` ([`http`]) with the
//! metrics encoded by `prometheus-client` ([`metrics`]), the accept loop
//! every server uses ([`accept`]), returning a one-off heap peak to the
//! kernel ([`memory`]) and the families too costly to render on
//! every scrape ([`snapshot`]). Commands and the
//! data path register what they measure here; this layer depends on
//! neither.

pub mod accept;
pub mod http;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod snapshot;
