//! `cargo xtask image`: the container image of `deploy/Dockerfile`, built
//! offline: a static (musl) `ssh-fwd` and podman, no registry.

use std::path::PathBuf;

use anyhow::Context as _;
use ssh_fwd_tests::image;

pub struct Options {
    /// The lighter profile the tests use, instead of `--release`.
    pub test_profile: bool,
    pub tag: String,
    pub save: Option<PathBuf>,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    if let Some(why) = image::missing_tools() {
        anyhow::bail!("cargo xtask image {why}");
    }
    let profile = if options.test_profile {
        image::TEST_PROFILE
    } else {
        "release"
    };
    let binary = crate::build_static(profile)?;
    let reference = image::qualified(&options.tag);
    println!("==> podman build -f deploy/Dockerfile -t {reference} (the static binary only)");
    image::build(&binary, &reference)?;
    let Some(archive) = &options.save else {
        println!("    built {reference}; `--save FILE.tar` writes it for kind or minikube");
        return Ok(());
    };
    println!(
        "==> podman save --format docker-archive -o {}",
        archive.display()
    );
    image::save(&reference, archive)?;
    let archive =
        std::fs::canonicalize(archive).with_context(|| format!("finding {}", archive.display()))?;
    println!(
        "    load it into a cluster's nodes with one of:\n      \
         kind load image-archive {archive} --name ssh-fwd\n      \
         minikube image load {archive}\n    \
         then `kubectl apply -k deploy/overlays/kind`, which runs ssh-fwd:dev \
         (docker.io/library/ssh-fwd:dev); this archive holds {reference}",
        archive = archive.display()
    );
    Ok(())
}
