//! `cargo xtask test --kernel 6.1`: a chosen set of the privileged tests
//! inside a VM running Debian 12's own kernel, booted by virtme-ng with
//! this machine's root file system (read-only, with overlays) under
//! emulation: KVM guests hang early here, and the guest's stdout does not
//! come back through virtme's script channel, so the guest writes each
//! test's output into a directory shared read-write, and this reads it.
//!
//! The set fits emulation's cost (each test runs several times slower):
//! the programs on crafted packets, an ssh login through the external
//! interface in tc mode (clsact, as that kernel has no tcx), a restart
//! that keeps a session, hairpin, the announcement, and the kernel-feature
//! tests. `--quick` (what CI runs) takes only the program tests, which put
//! every program through that kernel's verifier. A test that cannot run
//! there is listed as skipped with its reason, never counted passed; one
//! that did not report is counted failed.

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, bail};

use crate::{build_ssh_fwd, build_static, cargo, workspace_root};

pub mod boot;

/// The test target of `ssh-fwd-tests` that holds every test (tests/Cargo.toml).
const TEST_TARGET: &str = "integration";

/// One test the guest runs: its module of the test binary, and its name
/// there.
struct Chosen {
    module: &'static str,
    name: &'static str,
}

impl Chosen {
    /// Its exact name in the test binary, `module::name`.
    fn path(&self) -> String {
        format!("{}::{}", self.module, self.name)
    }

    /// Whether it is in `module` or a module below it.
    fn in_module(&self, module: &str) -> bool {
        (self.module.strip_prefix(module))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    }
}

const fn chosen(module: &'static str, name: &'static str) -> Chosen {
    Chosen { module, name }
}

/// The modules `--quick` runs of [`CHOSEN`].
const QUICK: &[&str] = &["programs"];

/// What runs on 6.1.
const CHOSEN: &[Chosen] = &[
    chosen("programs", "object_maps_agree_with_the_shared_constants"),
    chosen(
        "programs",
        "tc_ingress_program_rewrites_hits_exactly_and_passes_everything_else_untouched",
    ),
    chosen(
        "programs",
        "xdp_program_rewrites_hits_exactly_and_passes_everything_else_untouched",
    ),
    chosen(
        "programs",
        "tc_egress_program_restores_the_frontend_on_replies_of_tracked_connections",
    ),
    chosen(
        "programs::conntrack::checks",
        "the_kernel_counts_the_agents_changes_and_the_sweep_counts_idle_connections_off",
    ),
    chosen("datapath", "ssh_login_through_frontend_lands_in_the_pod"),
    chosen("agent_lifecycle", "ssh_session_survives_an_agent_restart"),
    chosen(
        "hairpin",
        "in_cluster_clients_reach_a_frontend_with_the_ssh_ip_on_lo_and_without",
    ),
    chosen(
        "announce",
        "one_node_answers_arp_for_the_ssh_ip_and_logins_land_in_the_pod_not_on_the_node",
    ),
    chosen(
        "kernels",
        "without_tcx_tc_goes_through_clsact_next_to_a_foreign_filter_and_keeps_sessions",
    ),
    chosen(
        "kernels",
        "without_xdp_auto_takes_tc_and_xdp_is_refused_with_the_way_out",
    ),
    chosen(
        "kernels",
        "what_the_data_path_cannot_load_without_is_refused_naming_the_feature",
    ),
];

/// Chosen tests that cannot run on 6.1, and why: reported skipped.
const SKIPPED: &[(&str, &str)] = &[(
    "kernels::on_this_kernel_every_feature_is_present_and_tc_goes_through_tcx",
    "asserts tcx present; 6.1 has none (the clsact tests cover that kernel)",
)];

/// Runs the chosen set on `kernel`: only its program tests with `quick`,
/// and only the tests whose `module::name` contains one of `filters`, if
/// any are given.
pub fn run(kernel: &str, quick: bool, filters: &[String]) -> anyhow::Result<()> {
    let started = Instant::now();
    let chosen = choose(quick, filters);
    if chosen.is_empty() {
        bail!(
            "no test of the {kernel} set matches {filters:?}; `cargo xtask test --kernel {kernel}` \
             lists them as it runs them"
        );
    }
    let guest = boot::Guest::new(kernel, "out")?;
    let bin = build_ssh_fwd()?;
    let static_bin = build_static(ssh_fwd_tests::image::TEST_PROFILE)?;
    let binary = build_tests()?;
    let out = &guest.out;
    println!(
        "==> booting {} under emulation (virtme-ng, no KVM) and running {} tests there",
        guest.vmlinuz.display(),
        chosen.len()
    );
    let boot = Instant::now();
    let status = guest.boot(&guest_script(&chosen, out, &bin, &static_bin, &binary))?;
    println!(
        "    the VM ran {:.0} s ({status}); its outputs are in {}",
        boot.elapsed().as_secs_f64(),
        out.display()
    );
    let uname = guest.uname()?;
    report(&chosen, quick, out, &uname, started)
}

/// The tests of [`CHOSEN`] to run: only those of [`QUICK`] with `quick`,
/// and only those whose `module::name` contains one of `filters`, if any.
fn choose(quick: bool, filters: &[String]) -> Vec<&'static Chosen> {
    CHOSEN
        .iter()
        .filter(|c| !quick || QUICK.iter().any(|q| c.in_module(q)))
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.path().contains(f.as_str())))
        .collect()
}

/// What the guest runs after [`boot`]'s prelude: each chosen test alone
/// (the test binary with that test's exact name), its output and its time
/// into the shared directory.
fn guest_script(
    chosen: &[&Chosen],
    out: &Path,
    bin: &Path,
    static_bin: &Path,
    binary: &Path,
) -> String {
    let mut s = format!(
        "export SSH_FWD_BIN={bin} SSH_FWD_STATIC_BIN={static_bin} RUST_BACKTRACE=0 \
         SSH_FWD_TEST_TIME_SCALE=6\n\
         cd {tests}\n",
        bin = bin.display(),
        static_bin = static_bin.display(),
        tests = workspace_root().join("tests").display(),
    );
    for (i, test) in chosen.iter().enumerate() {
        s.push_str(&format!(
            "s=$(date +%s); timeout 900 {binary} --include-ignored --exact --test-threads=1 \
             {path} > {out}/{i}.txt 2>&1; echo \"{path} rc=$? secs=$(( $(date +%s) - s ))\" \
             >> {out}/times\n",
            binary = binary.display(),
            path = test.path(),
            out = out.display(),
        ));
    }
    s.push_str(&format!("touch {}/done\n", out.display()));
    s
}

/// Reads each test's outcome back; fails unless every chosen test passed.
fn report(
    chosen: &[&Chosen],
    quick: bool,
    out: &Path,
    uname: &str,
    started: Instant,
) -> anyhow::Result<()> {
    let times = std::fs::read_to_string(out.join("times")).unwrap_or_default();
    println!("==> results on {uname}");
    let (mut passed, mut failed) = (0, 0);
    for (i, test) in chosen.iter().enumerate() {
        let text = std::fs::read_to_string(out.join(format!("{i}.txt"))).unwrap_or_default();
        let full = test.path();
        let line = times.lines().find(|l| l.starts_with(&format!("{full} ")));
        let ok = passed_in(&text, line);
        let secs = line.and_then(|l| l.rsplit("secs=").next()).unwrap_or("?");
        let verdict = if ok {
            passed += 1;
            "passed"
        } else if text.is_empty() {
            failed += 1;
            "failed (did not report)"
        } else {
            failed += 1;
            "failed"
        };
        println!("    {verdict:<24} {full} ({secs} s)");
    }
    let skipped: Vec<&(&str, &str)> = SKIPPED
        .iter()
        .filter(|(name, _)| {
            chosen.iter().any(|c| {
                name.strip_prefix(c.module)
                    .is_some_and(|n| n.starts_with("::"))
            })
        })
        .filter(|_| !quick)
        .collect();
    for (name, why) in &skipped {
        println!("    {:<24} {name}: {why}", "skipped");
    }
    println!(
        "    {passed} passed, {failed} failed, {} skipped, in {:.0} s; each test's output is in \
         {}",
        skipped.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    if failed > 0 {
        bail!("{failed} test(s) failed on kernel {uname}");
    }
    Ok(())
}

/// Builds the test binary; its path.
fn build_tests() -> anyhow::Result<PathBuf> {
    println!("==> building the test binary");
    let output = cargo()
        .args([
            "test",
            "--no-run",
            "--message-format=json",
            "-p",
            "ssh-fwd-tests",
            "--test",
            TEST_TARGET,
        ])
        .output()
        .context("cargo test --no-run")?;
    anyhow::ensure!(
        output.status.success(),
        "building the tests failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|message| message["target"]["name"] == TEST_TARGET)
        .and_then(|message| message["executable"].as_str().map(PathBuf::from))
        .with_context(|| format!("cargo built no test binary named {TEST_TARGET}"))
}

/// A test passed if its binary exited 0 and libtest says so. Not from the
/// line `test NAME ... ok` alone: a child's stderr (an agent's exit
/// message) can land between the name and the verdict.
fn passed_in(text: &str, times_line: Option<&str>) -> bool {
    let exited_0 = times_line.is_some_and(|l| l.split_whitespace().any(|w| w == "rc=0"));
    exited_0 && text.contains("test result: ok. 1 passed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chosen_and_skipped_test_is_a_test_of_its_module() {
        let paths = CHOSEN
            .iter()
            .map(Chosen::path)
            .chain(SKIPPED.iter().map(|(path, _)| (*path).to_owned()));
        for path in paths {
            let (module, name) = path.rsplit_once("::").unwrap();
            let file = workspace_root()
                .join("tests/tests")
                .join(format!("{}.rs", module.replace("::", "/")));
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(
                text.contains(&format!("fn {name}() {{")),
                "{path}: no such test in {}",
                file.display()
            );
        }
    }

    #[test]
    fn quick_takes_the_program_tests_and_a_filter_matches_the_whole_name() {
        let quick = choose(true, &[]);
        assert!(!quick.is_empty());
        assert!(quick.iter().all(|c| c.in_module("programs")));
        let filtered = choose(false, &["kernels::without_".to_owned()]);
        assert_eq!(filtered.len(), 2);
        assert!(choose(true, &["datapath::".to_owned()]).is_empty());
    }

    #[test]
    fn a_pass_is_read_from_the_exit_code_and_the_summary_not_the_test_line() {
        let interleaved = "running 1 test\ntest t ... error: the kernel still has link(s) 8 \
                           attached\nok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored\n";
        assert!(passed_in(interleaved, Some("x::t rc=0 secs=148")));
        assert!(!passed_in(interleaved, Some("x::t rc=101 secs=148")));
        assert!(!passed_in(interleaved, None));
        let failed = "test t ... FAILED\n\ntest result: FAILED. 0 passed; 1 failed\n";
        assert!(!passed_in(failed, Some("x::t rc=0 secs=3")));
    }
}
