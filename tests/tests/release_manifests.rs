//! A release's install manifests, as `cargo xtask release` renders them
//! (`ssh_fwd_tests::manifest`, the same code), applied to the fake API
//! server as `kubectl apply -f` sends them to a fresh cluster: every
//! variant, every object accepted in the file's order, and every workload
//! on the image pinned by its digest. Needs kubectl (or kustomize), no
//! privileges.

use ssh_fwd_tests::{
    fake_api::{ApiKind, FakeApi},
    manifest::{COMPONENTS, Digest, Variant, documents, pinned_reference, workload_images},
};

/// A digest as `cargo xtask release` reads it from the image index.
const DIGEST: &str = "sha256:5f2b2a1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";

/// The CRDs a component needs installed first, as deploy/README says:
/// cert-manager's, and the Prometheus operator's.
fn crds_of(variant: &Variant) -> Vec<ApiKind> {
    let mut crds = Vec::new();
    for &i in &variant.components {
        match COMPONENTS[i].1 {
            "cert-manager" => {
                for kind in ["Certificate", "Issuer"] {
                    crds.push(ApiKind::new("cert-manager.io/v1", kind, true));
                }
            }
            "monitoring" => {
                for kind in ["PodMonitor", "ServiceMonitor", "PrometheusRule"] {
                    crds.push(ApiKind::new("monitoring.coreos.com/v1", kind, true));
                }
            }
            _ => {}
        }
    }
    crds
}

#[test]
fn every_release_manifest_applies_to_a_fresh_cluster_with_the_image_pinned() {
    let digest = Digest::parse(DIGEST).unwrap();
    let reference = pinned_reference("0.1.0", &digest);
    let scratch = tempfile::tempdir().unwrap();
    let variants = Variant::all();
    assert_eq!(variants.len(), 1 << COMPONENTS.len());
    for variant in variants {
        let name = variant.file_name();
        let text = variant
            .render("0.1.0", &digest, &scratch.path().join(&name))
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let objects = documents(&text).unwrap();
        assert_eq!(
            objects[0]["kind"], "Namespace",
            "{name}: the Namespace comes first"
        );
        let api = FakeApi::start_on_loopback().unwrap();
        let installed = api
            .install(&objects, &crds_of(&variant))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(installed.created, objects.len(), "{name}");
        let images = workload_images(&objects);
        let workloads: Vec<&str> = images.iter().map(|(owner, _)| owner.as_str()).collect();
        assert!(
            workloads.contains(&"DaemonSet/ssh-fwd-agent")
                && workloads.contains(&"Deployment/ssh-fwd-controller"),
            "{name}: {workloads:?}"
        );
        for (owner, image) in images {
            assert_eq!(image, reference, "{name}: {owner}");
            assert!(image.ends_with(&format!("@{DIGEST}")), "{name}: {owner}");
        }
    }
}

#[test]
fn a_component_whose_crds_are_missing_is_refused_as_a_cluster_would() {
    let digest = Digest::parse(DIGEST).unwrap();
    let monitoring = COMPONENTS
        .iter()
        .position(|(_, name)| *name == "monitoring")
        .unwrap();
    let variant = Variant {
        components: vec![monitoring],
    };
    let scratch = tempfile::tempdir().unwrap();
    let text = variant.render("0.1.0", &digest, scratch.path()).unwrap();
    let api = FakeApi::start_on_loopback().unwrap();
    let error = api.install(&documents(&text).unwrap(), &[]).unwrap_err();
    assert!(error.contains("ensure CRDs are installed first"), "{error}");
}
