//! Metrics in the OpenMetrics text format, through `prometheus-client` (the
//! crate kube-rs's controller example uses): a registry per process, and the
//! bucket layouts its histograms share.

use prometheus_client::{
    encoding::text::{encode_eof, encode_registry},
    metrics::histogram::{Histogram, exponential_buckets},
    registry::Registry,
};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A histogram of durations in seconds, from 100 µs to about 100 s, which
/// covers a map write as well as a reconcile of 50,000 mappings.
pub fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

/// The registry, and the process's own figures (`accept.rs`), as
/// OpenMetrics text. Writing into a `String` cannot fail; a collector that
/// fails is named in a comment instead of ending the body.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    let encoded = encode_registry(&mut out, registry)
        .and_then(|()| encode_registry(&mut out, &super::accept::process_registry()));
    if let Err(e) = encoded {
        out.push_str(&format!("# encoding failed: {e}\n"));
    }
    // Writing into a String cannot fail.
    let _ = encode_eof(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[test]
    fn histograms_export_sum_and_count_together() {
        let mut registry = Registry::default();
        let h = seconds_histogram();
        registry.register("reconcile_duration_seconds", "Time spent.", h.clone());
        let c: Counter = Counter::default();
        registry.register("reconciles", "Completed.", c.clone());
        h.observe(0.003);
        c.inc();
        let text = render(&registry);
        assert!(
            text.contains("reconcile_duration_seconds_sum 0.003"),
            "{text}"
        );
        assert!(
            text.contains("reconcile_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("reconcile_duration_seconds_bucket{le=\"0.0064\"} 1"),
            "{text}"
        );
        assert!(text.contains("reconciles_total 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
