//! The soak's figures as markdown, for bench/results.

use std::{fmt::Write as _, time::Duration};

use ssh_fwd_tests::soak::report::{Report, secs};

/// Today's date, `YYYY-MM-DD` (UTC), from `date`.
pub fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "undated".to_owned(), |s| s.trim().to_owned())
}

/// `15 min` or `60 s`.
pub fn minutes(d: Duration) -> String {
    if d.as_secs().is_multiple_of(60) && d.as_secs() >= 60 {
        format!("{} min", d.as_secs() / 60)
    } else {
        format!("{} s", d.as_secs())
    }
}

/// The report: how it ran, the figures against their goals, the faults
/// as they ran, and the summary as printed.
pub fn markdown(report: &Report, date: &str) -> String {
    let i = &report.inputs;
    let r = &i.records;
    let sc = &i.scale;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Soak, {date}: {} of load, seed {}\n",
        minutes(i.load),
        i.seed
    );
    let _ = writeln!(
        s,
        "`cargo xtask soak --seconds {} --seed {}` replays it (docs/testing.md, \"The soak\"). \
         Load: {} jobs, {} long sessions (a numbered line a second each, every echo checked), \
         {} new logins a second, an scp of {} MiB each way every {}, {} spoofed SYNs a second, \
         the per-source hammer, a job ended and another started every {}. Faults: {} planned, {} run, \
         2 to 6 s each, overlapping. Wall time {}.\n",
        i.load.as_secs(),
        i.seed,
        sc.jobs,
        sc.sessions,
        sc.logins_per_second,
        sc.scp_mib,
        secs(sc.scp_every),
        sc.flood_per_second,
        secs(sc.churn_every),
        i.plan.len(),
        r.windows.len(),
        secs(i.wall),
    );
    let failures = report.failures();
    let defects = report.defects();
    let _ = writeln!(
        s,
        "Verdict: **{}**; defects beyond the goals: **{}**\n",
        if failures.is_empty() {
            "nothing lost, corrupted or leaked".to_owned()
        } else {
            format!("{} problems", failures.len())
        },
        defects.len()
    );
    for f in failures.iter().chain(&defects) {
        let _ = writeln!(s, "- {f}");
    }
    let _ = writeln!(
        s,
        "\n## Figures\n\n| what | measured | goal |\n| --- | --- | --- |"
    );
    let row = |s: &mut String, what: &str, measured: String, goal: &str| {
        let _ = writeln!(s, "| {what} | {measured} | {goal} |");
    };
    let ss = &report.sessions;
    row(
        &mut s,
        "sessions opened / ended by the test",
        format!("{} / {}", ss.opened, ss.ended_by_test),
        "",
    );
    row(
        &mut s,
        "sessions lost (a path existed)",
        ss.lost.len().to_string(),
        "0",
    );
    row(
        &mut s,
        "sessions lost in no-path windows",
        ss.lost_no_path.len().to_string(),
        "counted apart",
    );
    row(
        &mut s,
        "echo bytes checked / corrupted",
        format!("{} / {}", r.bytes_checked, r.bytes_corrupted),
        "corrupted 0",
    );
    let l = &report.logins;
    row(
        &mut s,
        "logins tried / landed",
        format!("{} / {}", l.tried, l.landed),
        "",
    );
    row(
        &mut s,
        "logins failed inside / outside fault windows",
        format!("{} / {}", l.failed_inside.len(), l.failed_outside.len()),
        "outside 0",
    );
    row(
        &mut s,
        "logins to jobs the test ended",
        l.job_ended.to_string(),
        "",
    );
    let c = &report.scp;
    row(
        &mut s,
        "scp copies / checksums equal / differed",
        format!(
            "{} / {} / {}",
            c.tried,
            c.landed - r.scp_differed.len() as u64,
            r.scp_differed.len()
        ),
        "differed 0",
    );
    row(
        &mut s,
        "scp failed inside / outside windows",
        format!("{} / {}", c.failed_inside.len(), c.failed_outside.len()),
        "outside 0",
    );
    row(&mut s, "spoofed SYNs sent", r.flood_sent.to_string(), "");
    let h = &r.hammer;
    row(
        &mut s,
        "hammer cycles / admitted / held at the quota / admitted over it",
        format!(
            "{} / {} / {} / {}",
            h.cycles, h.admitted, h.held_at_quota, h.admitted_over_quota
        ),
        "",
    );
    row(
        &mut s,
        "hammer refused under the quota",
        h.refused_below_quota.len().to_string(),
        "0 outside windows",
    );
    row(
        &mut s,
        "jobs started / ended",
        format!("{} / {}", r.jobs_started, r.jobs_ended),
        "",
    );
    for (role, rss) in &i.samples.rss {
        row(
            &mut s,
            &format!("RSS {role} start / max / end"),
            format!("{} / {} / {} KiB", rss.start_kib, rss.max_kib, rss.end_kib),
            "",
        );
    }
    for n in 0..2 {
        let (b, a) = (&i.baseline[n], &i.after[n]);
        row(
            &mut s,
            &format!("node{n} CONNS before / after"),
            format!("{} / {}", b.conns, a.conns),
            "back to baseline",
        );
        row(
            &mut s,
            &format!("node{n} SOURCES entries before / after, counts not 0"),
            format!(
                "{} / {}, {}",
                b.sources.len(),
                a.sources.len(),
                a.held().len()
            ),
            "0 not 0",
        );
        row(
            &mut s,
            &format!("node{n} HALF_OPEN / CLAIMS before / after"),
            format!(
                "{} / {} -> {} / {}",
                b.half_open, b.claims, a.half_open, a.claims
            ),
            "LRUs (see docs)",
        );
    }
    row(
        &mut s,
        "tables back to baseline after",
        i.settled.map_or("never (40 s)".into(), secs),
        "",
    );
    for (role, series, v) in i.samples.counters() {
        row(
            &mut s,
            &format!("{role} `{series}`"),
            v.to_string(),
            "0, or only while a fault is on",
        );
    }
    let _ = writeln!(
        s,
        "\n## Faults as they ran\n\n| from | to | fault |\n| --- | --- | --- |"
    );
    let mut windows = r.windows.clone();
    windows.sort_by_key(|w| w.from);
    for w in &windows {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            secs(w.from),
            secs(w.to),
            w.fault.name()
        );
    }
    let _ = writeln!(
        s,
        "\n## Summary as printed\n\n```text\n{}```",
        report.summary()
    );
    s
}
