//! The failures of a `cargo test` run, told again at its end: CI keeps
//! the head and the tail of a long log, and libtest prints each failing
//! test's message in the middle, before the last one's backtrace.

/// At most this many lines of one test's message.
const LINES: usize = 40;

/// Each failing test's name and the lines of its panic message, from
/// libtest's `---- NAME stdout ----` sections, in order. The message runs
/// from the `panicked at` line to the backtrace or the section's end.
pub fn failures(output: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut telling = false;
    for line in output.lines() {
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        {
            out.push((name.to_owned(), Vec::new()));
            telling = false;
            continue;
        }
        let Some((_, lines)) = out.last_mut() else {
            continue;
        };
        if line.starts_with("thread '") && line.contains("panicked at") {
            telling = true;
        } else if line == "failures:" || line.starts_with("stack backtrace:") {
            telling = false;
        } else if line.starts_with("note: run with `RUST_BACKTRACE") {
            continue;
        }
        if telling && lines.len() < LINES {
            lines.push(line.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
running 3 tests
test a::passes ... ok
test a::fails ... FAILED
test b::fails_too ... FAILED

failures:

---- a::fails stdout ----
some output of the test
thread 'a::fails' (123) panicked at tests/a.rs:5:9:
login 0: Err(timed out)
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

---- b::fails_too stdout ----
thread 'b::fails_too' (124) panicked at tests/b.rs:9:9:
the soak failed:
DEFECT: held back
stack backtrace:
   0: __rustc::rust_begin_unwind


failures:
    a::fails
    b::fails_too

test result: FAILED. 1 passed; 2 failed
";

    #[test]
    fn each_failure_is_told_with_its_message_and_without_its_backtrace() {
        assert_eq!(
            failures(RUN),
            [
                (
                    "a::fails".to_owned(),
                    vec![
                        "thread 'a::fails' (123) panicked at tests/a.rs:5:9:".to_owned(),
                        "login 0: Err(timed out)".to_owned(),
                        String::new(),
                    ]
                ),
                (
                    "b::fails_too".to_owned(),
                    vec![
                        "thread 'b::fails_too' (124) panicked at tests/b.rs:9:9:".to_owned(),
                        "the soak failed:".to_owned(),
                        "DEFECT: held back".to_owned(),
                    ]
                ),
            ]
        );
    }

    #[test]
    fn a_passing_run_has_nothing_to_tell() {
        assert!(failures("running 1 test\ntest a ... ok\n\ntest result: ok.\n").is_empty());
    }

    #[test]
    fn a_long_message_is_cut_short() {
        let long = format!(
            "---- t stdout ----\nthread 't' panicked at x.rs:1:1:\n{}",
            "line\n".repeat(100)
        );
        assert_eq!(failures(&long)[0].1.len(), LINES);
    }
}
