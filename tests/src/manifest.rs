//! The install manifests of a release: deploy/base with each combination
//! of deploy/'s components, rendered by kustomize (kubectl's, or a
//! `kustomize` on the PATH) with the image pinned to a digest. `cargo
//! xtask release` writes them; `tests/tests/release_manifests.rs` applies
//! every one to the fake API server.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

/// The image name deploy/base gives the workloads; a release pins it.
pub const IMAGE_NAME: &str = "ghcr.io/ssh-fwd/ssh-fwd";

/// The optional parts of an install, each a kustomize Component: its
/// directory under deploy/ and the name a variant's file uses for it.
pub const COMPONENTS: [(&str, &str); 4] = [
    ("components/announce-l2", "announce-l2"),
    ("components/cert-manager", "cert-manager"),
    (
        "components/webhook-network-policy",
        "webhook-network-policy",
    ),
    ("monitoring", "monitoring"),
];

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// An image digest, `sha256:` and 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest(String);

impl Digest {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let hex = text
            .strip_prefix("sha256:")
            .with_context(|| format!("image digest {text:?} does not start with sha256:"))?;
        ensure!(
            hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "image digest {text:?} is not sha256: and 64 lowercase hex digits"
        );
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The image as a release's manifests name it: the tag for people, the
/// digest for the container runtime, which pulls by the digest alone.
pub fn pinned_reference(version: &str, digest: &Digest) -> String {
    format!("{IMAGE_NAME}:{version}@{}", digest.as_str())
}

/// One install: deploy/base and some of [`COMPONENTS`] (indices into it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    pub components: Vec<usize>,
}

impl Variant {
    /// Every combination, base alone first.
    pub fn all() -> Vec<Self> {
        (0..1u32 << COMPONENTS.len())
            .map(|mask| Self {
                components: (0..COMPONENTS.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .collect(),
            })
            .collect()
    }

    /// `install.yaml` for base alone, else `install+NAME+NAME.yaml` in
    /// [`COMPONENTS`]' order.
    pub fn file_name(&self) -> String {
        let names: String = self
            .components
            .iter()
            .map(|&i| format!("+{}", COMPONENTS[i].1))
            .collect();
        format!("install{names}.yaml")
    }

    /// The kustomization of this variant pinned to `digest`; `deploy` is
    /// deploy/ relative to the directory it is written to (kustomize takes
    /// only relative paths).
    pub fn kustomization(&self, deploy: &str, version: &str, digest: &Digest) -> String {
        let components: String = self
            .components
            .iter()
            .map(|&i| format!("  - {deploy}/{}\n", COMPONENTS[i].0))
            .collect();
        let components = if components.is_empty() {
            String::new()
        } else {
            format!("components:\n{components}")
        };
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n  - {deploy}/base\n{components}\
             images:\n  - name: {IMAGE_NAME}\n    newTag: \"{version}\"\n    digest: {}\n",
            digest.as_str()
        )
    }

    /// Renders this variant with kustomize in `scratch` (a directory of
    /// its own, created) and checks that every workload runs the pinned
    /// image; the manifest as text.
    pub fn render(&self, version: &str, digest: &Digest, scratch: &Path) -> anyhow::Result<String> {
        std::fs::create_dir_all(scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let deploy = relative(scratch, &deploy())?;
        std::fs::write(
            scratch.join("kustomization.yaml"),
            self.kustomization(&deploy, version, digest),
        )
        .with_context(|| format!("writing {}/kustomization.yaml", scratch.display()))?;
        let text = kustomize(scratch)?;
        check_pinned(&documents(&text)?, &pinned_reference(version, digest))
            .with_context(|| format!("{} is not pinned", self.file_name()))?;
        Ok(text)
    }
}

/// A kustomization directory of deploy/ (`overlays/kind`) as kustomize
/// builds it, one value per document.
pub fn build(dir: &str) -> anyhow::Result<Vec<Value>> {
    documents(&kustomize(&deploy().join(dir))?)
}

/// `kustomize build DIR` with kustomize's own or kubectl's.
fn kustomize(dir: &Path) -> anyhow::Result<String> {
    let mut cmd = match crate::privilege::which("kustomize") {
        Some(kustomize) => {
            let mut c = Command::new(kustomize);
            c.arg("build");
            c
        }
        None => {
            let mut c = Command::new("kubectl");
            c.arg("kustomize");
            c
        }
    };
    cmd.arg(dir);
    crate::cmd::run(&mut cmd).context(
        "rendering with kustomize; this needs kubectl (1.27 or newer) or kustomize 5 on the PATH",
    )
}

/// `to` relative to `from` (both existing directories).
fn relative(from: &Path, to: &Path) -> anyhow::Result<String> {
    let from = from
        .canonicalize()
        .with_context(|| format!("resolving {}", from.display()))?;
    let to = to
        .canonicalize()
        .with_context(|| format!("resolving {}", to.display()))?;
    let up = from.components().count() - 1;
    let down = to.strip_prefix("/").unwrap_or(&to);
    Ok(format!("{}{}", "../".repeat(up), down.display()))
}

/// A multi-document YAML stream as JSON values, empty documents left out.
pub fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let docs = serde_saphyr::from_multiple::<Value>(text).context("parsing the manifest")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Every container image of the workloads in `docs`, as
/// (`Kind/name`, image).
pub fn workload_images(docs: &[Value]) -> Vec<(String, String)> {
    let mut images = Vec::new();
    for doc in docs {
        let pod = match doc["kind"].as_str() {
            Some("Pod") => &doc["spec"],
            Some("DaemonSet" | "Deployment" | "StatefulSet" | "Job" | "ReplicaSet") => {
                &doc["spec"]["template"]["spec"]
            }
            Some("CronJob") => &doc["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            _ => continue,
        };
        let owner = format!(
            "{}/{}",
            doc["kind"].as_str().unwrap_or(""),
            doc["metadata"]["name"].as_str().unwrap_or("")
        );
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            for container in pod[list].as_array().into_iter().flatten() {
                let image = container["image"].as_str().unwrap_or("").to_owned();
                images.push((owner.clone(), image));
            }
        }
    }
    images
}

/// Every workload's every container runs `reference`, and there is at
/// least one workload.
pub fn check_pinned(docs: &[Value], reference: &str) -> anyhow::Result<()> {
    let images = workload_images(docs);
    ensure!(!images.is_empty(), "no workload in the manifest");
    for (owner, image) in images {
        if image != reference {
            bail!("{owner} runs {image:?}, not {reference}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_digest_is_sha256_and_64_lowercase_hex_digits() {
        assert!(Digest::parse(DIGEST).is_ok());
        for bad in [
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "sha256:0123",
            "sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_pinned_reference_carries_the_version_and_the_digest() {
        let digest = Digest::parse(DIGEST).unwrap();
        assert_eq!(
            pinned_reference("0.1.0", &digest),
            format!("ghcr.io/ssh-fwd/ssh-fwd:0.1.0@{DIGEST}")
        );
    }

    #[test]
    fn every_combination_is_a_variant_named_after_its_components() {
        let variants = Variant::all();
        assert_eq!(variants.len(), 16);
        let names: Vec<String> = variants.iter().map(Variant::file_name).collect();
        assert_eq!(names[0], "install.yaml");
        assert!(names.contains(&"install+announce-l2+cert-manager.yaml".to_owned()));
        assert!(names.contains(
            &"install+announce-l2+cert-manager+webhook-network-policy+monitoring.yaml".to_owned()
        ));
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn the_kustomization_lists_base_the_components_and_the_pinned_image() {
        let digest = Digest::parse(DIGEST).unwrap();
        let variant = Variant {
            components: vec![0, 3],
        };
        let text = variant.kustomization("../deploy", "0.1.0", &digest);
        let doc = &documents(&text).unwrap()[0];
        assert_eq!(doc["resources"][0], "../deploy/base");
        assert_eq!(doc["components"][0], "../deploy/components/announce-l2");
        assert_eq!(doc["components"][1], "../deploy/monitoring");
        assert_eq!(doc["images"][0]["name"], IMAGE_NAME);
        assert_eq!(doc["images"][0]["newTag"], "0.1.0");
        assert_eq!(doc["images"][0]["digest"], DIGEST);
        let plain = Variant { components: vec![] }.kustomization("../deploy", "0.1.0", &digest);
        assert!(!plain.contains("components:"), "{plain}");
    }

    #[test]
    fn a_workload_on_another_image_or_a_tag_alone_is_not_pinned() {
        let pod = |image: &str| {
            serde_json::json!({
                "kind": "DaemonSet", "metadata": {"name": "agent"},
                "spec": {"template": {"spec": {
                    "initContainers": [{"image": image}],
                    "containers": [{"image": format!("{IMAGE_NAME}:0.1.0@{DIGEST}")}],
                }}},
            })
        };
        let reference = format!("{IMAGE_NAME}:0.1.0@{DIGEST}");
        assert!(check_pinned(&[pod(&reference)], &reference).is_ok());
        let error = check_pinned(&[pod("ghcr.io/ssh-fwd/ssh-fwd:0.1.0")], &reference)
            .unwrap_err()
            .to_string();
        assert!(error.contains("DaemonSet/agent runs"), "{error}");
        assert!(check_pinned(&[], &reference).is_err());
    }
}
