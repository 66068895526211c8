//! `/metrics` (Prometheus text), `/healthz` and `/readyz`: a minimal HTTP/1.1
//! responder, enough for Prometheus and kubelet probes.

use std::{fmt::Write as _, net::SocketAddr, sync::Arc, sync::atomic::Ordering};

use super::health::Health;
use crate::{http_probe, list, pins::PinLayout};

pub async fn serve(addr: SocketAddr, layout: PinLayout, health: Arc<Health>) -> anyhow::Result<()> {
    http_probe::serve(
        addr,
        Arc::new(move |path: &str| match path {
            "/healthz" => ("200 OK", "ok\n".to_owned()),
            "/readyz" if health.ready.load(Ordering::Relaxed) => ("200 OK", "ready\n".to_owned()),
            "/readyz" => (
                "503 Service Unavailable",
                "waiting for the first complete reconcile\n".to_owned(),
            ),
            "/metrics" => ("200 OK", render(&layout, &health)),
            _ => (
                "404 Not Found",
                "try /metrics, /healthz or /readyz\n".to_owned(),
            ),
        }),
    )
    .await
}

fn render(layout: &PinLayout, h: &Health) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    metric(
        "ssh_fwd_mappings",
        "gauge",
        "Mappings installed by the last reconcile.",
        h.mappings.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "ssh_fwd_reconciles_total",
        "counter",
        "Completed reconciles.",
        h.reconciles.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "ssh_fwd_reconcile_errors_total",
        "counter",
        "Reconciles that failed to apply.",
        h.reconcile_errors.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "ssh_fwd_reconcile_duration_seconds_sum",
        "counter",
        "Time spent reconciling.",
        format!(
            "{:.6}",
            h.reconcile_micros_total.load(Ordering::Relaxed) as f64 / 1e6
        ),
    );
    metric(
        "ssh_fwd_last_reconcile_duration_seconds",
        "gauge",
        "Duration of the last reconcile.",
        format!(
            "{:.6}",
            h.last_reconcile_micros.load(Ordering::Relaxed) as f64 / 1e6
        ),
    );
    metric(
        "ssh_fwd_api_errors_total",
        "counter",
        "Kubernetes list/watch failures (retried).",
        h.api_errors().to_string(),
    );
    metric(
        "ssh_fwd_ready",
        "gauge",
        "1 once the first complete reconcile is done.",
        u8::from(h.ready.load(Ordering::Relaxed)).to_string(),
    );
    match list::collect(layout) {
        Ok(listing) => {
            type Counter = fn(&list::Row) -> (u64, u64);
            let per_mapping: [(&str, &str, Counter); 2] = [
                ("ssh_fwd_mapping_packets_total", "Packets", |m| {
                    (m.packets_in, m.packets_out)
                }),
                ("ssh_fwd_mapping_bytes_total", "Bytes", |m| {
                    (m.bytes_in, m.bytes_out)
                }),
            ];
            for (name, what, counter) in per_mapping {
                let _ = writeln!(
                    out,
                    "# HELP {name} {what} per mapping and direction.\n# TYPE {name} counter"
                );
                for m in &listing.mappings {
                    let labels = format!(
                        "mapping=\"{}\",frontend=\"{}\",backend=\"{}\"",
                        escape(&m.name),
                        m.frontend,
                        m.backend
                    );
                    let (inbound, outbound) = counter(m);
                    let _ = writeln!(out, "{name}{{{labels},direction=\"in\"}} {inbound}");
                    let _ = writeln!(out, "{name}{{{labels},direction=\"out\"}} {outbound}");
                }
            }
            let _ = writeln!(
                out,
                "# HELP ssh_fwd_packets_total Packets seen by the data path, by outcome.\n# TYPE ssh_fwd_packets_total counter"
            );
            for (outcome, n) in &listing.counters {
                let _ = writeln!(out, "ssh_fwd_packets_total{{outcome=\"{outcome}\"}} {n}");
            }
            let _ = writeln!(
                out,
                "# HELP ssh_fwd_tracked_connections Connections tracked for shared backends.\n# TYPE ssh_fwd_tracked_connections gauge\nssh_fwd_tracked_connections {}",
                listing.tracked_connections
            );
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "# pinned maps unreadable: {}",
                format!("{e:#}").replace('\n', " ")
            );
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
