//! `cargo xtask image`: the container image of `deploy/Dockerfile`, built
//! offline: a static (musl) `ssh-fwd` and podman, no registry.

use std::path::PathBuf;

use anyhow::Context as _;
use ssh_fwd_tests::image;

#[derive(clap::Args, Debug)]
pub struct Options {
    /// Build the binary with the dev profile the tests use (quicker to
    /// build, unoptimised, no debug info) instead of `--release`.
    #[arg(long)]
    pub test_profile: bool,
    /// The image name; a short one is named as Docker and containerd name
    /// it (`ssh-fwd:dev` is `docker.io/library/ssh-fwd:dev`), so that a kind
    /// or minikube node finds the image the manifests name.
    #[arg(long, default_value = image::DEV_TAG)]
    pub tag: String,
    /// Also write the image to FILE as a docker-archive, for
    /// `kind load image-archive FILE` or `minikube image load FILE`.
    #[arg(long, value_name = "FILE")]
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
