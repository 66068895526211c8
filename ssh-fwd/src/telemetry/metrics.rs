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
    render_with(registry, "")
}

/// As [`render`], with `rendered` appended: families [`families`] rendered
/// earlier (`snapshot.rs`).
pub fn render_with(registry: &Registry, rendered: &str) -> String {
    let mut out = families(registry);
    out.push_str(&families(&super::accept::process_registry()));
    out.push_str(rendered);
    // Writing into a String cannot fail.
    let _ = encode_eof(&mut out);
    out
}

/// The registry's families as OpenMetrics text, without the final `# EOF`.
pub fn families(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = encode_registry(&mut out, registry) {
        out.push_str(&format!("# encoding failed: {e}\n"));
    }
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
