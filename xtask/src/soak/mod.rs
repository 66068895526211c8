//! `cargo xtask soak`: the cluster of `ssh_fwd_tests::soak` under every
//! load and fault at once for minutes, then its report: one screen on the
//! terminal, and the figures as markdown in bench/results (`report.rs`).
//! The soak itself lives in the test harness, which the 60-second soak of
//! `tests/tests/soak.rs` runs too.

mod report;

use std::{path::PathBuf, time::Duration};

use anyhow::bail;

/// Options of `cargo xtask soak`.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// How long the load runs, in minutes (setup and the settling of the
    /// tables come on top).
    #[arg(long, default_value_t = 15, conflicts_with = "seconds")]
    minutes: u64,
    /// The same in seconds (the CI soak's minute, a replay of it).
    #[arg(long)]
    seconds: Option<u64>,
    /// The seed of the fault schedule and of every random choice; the
    /// report names it, and the same seed replays the same schedule.
    #[arg(long)]
    seed: Option<u64>,
    /// Where the markdown report goes (default:
    /// bench/results/soak-YYYY-MM-DD.md).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!(
            "the soak runs namespaces, BPF and sshd, which cannot run here: {why}. Run it as root"
        );
    }
    let bin = crate::build_ssh_fwd()?;
    // SAFETY: set before any thread of ours starts.
    unsafe { std::env::set_var("SSH_FWD_BIN", &bin) };
    let length = Duration::from_secs(options.seconds.unwrap_or(options.minutes * 60));
    let seed = options.seed.unwrap_or_else(fresh_seed);
    let date = report::today();
    let dir = crate::target_dir()
        .join("soak")
        .join(format!("{date}-{seed}"));
    println!(
        "==> soak: {} of load, seed {seed}, logs in {}",
        report::minutes(length),
        dir.display()
    );
    ctrlc_cleanup();
    let soak = ssh_fwd_tests::soak::run(&ssh_fwd_tests::soak::Options {
        length,
        seed,
        dir: dir.clone(),
    })?;
    let summary = soak.summary();
    println!("{summary}");
    let out = options.out.clone().unwrap_or_else(|| {
        crate::workspace_root()
            .join("bench/results")
            .join(format!("soak-{date}.md"))
    });
    std::fs::write(&out, report::markdown(&soak, &date))?;
    println!("==> report: {}", out.display());
    let problems = soak.failures().len() + soak.defects().len();
    if problems > 0 {
        bail!(
            "the soak failed ({problems} problems); replay with --seconds {} --seed {seed}",
            length.as_secs()
        );
    }
    Ok(())
}

/// A seed from the clock, when none is given.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        % 1_000_000_007
}

/// On Ctrl-C, the namespaces this process made go (the guards' destructors
/// do not run on a signal).
fn ctrlc_cleanup() {
    let _ = ctrlc::set_handler(|| {
        ssh_fwd_tests::netns::remove_all_of_this_process();
        std::process::exit(130);
    });
}
