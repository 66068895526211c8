//! What a running process tells its operator: logs ([`logging`]), and the
//! HTTP endpoints `/metrics`, `/healthz` and `/readyz` ([`http`]) with the
//! metrics encoded by `prometheus-client` ([`metrics`]), and the accept loop
//! every server uses ([`accept`]). Commands and the
//! data path register what they measure here; this layer depends on
//! neither.

pub mod accept;
pub mod http;
pub mod logging;
pub mod metrics;
