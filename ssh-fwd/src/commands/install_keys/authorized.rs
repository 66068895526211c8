//! authorized_keys lines as sshd reads them (sshd(8), AUTHORIZED_KEYS FILE
//! FORMAT): optional options, then the key type, the base64 key and a
//! comment. The public key is parsed by the RustCrypto `ssh-key` crate; the
//! options are split here, because its authorized_keys parser refuses
//! common ones (`no-pty`, `command="..."` with a space). A line that does
//! not parse is reported with its number and never written.

/// Lines longer than this are refused (sshd's own limit is of this order).
const MAX_LINE: usize = 16 * 1024;

/// The keys to write, and the lines left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Each a valid line, re-encoded from the parsed key.
    pub lines: Vec<String>,
    /// (line number from 1, why).
    pub skipped: Vec<(usize, String)>,
}

impl Parsed {
    /// The file's content: one key per line.
    pub fn render(&self) -> String {
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

pub fn parse(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Ok(entry) => parsed.lines.push(entry),
            Err(why) => parsed.skipped.push((i + 1, why)),
        }
    }
    parsed
}

/// Whether `word` starts a key rather than options.
fn is_key_type(word: &str) -> bool {
    word.starts_with("ssh-")
        || word.starts_with("ecdsa-sha2-")
        || word.starts_with("sk-ssh-")
        || word.starts_with("sk-ecdsa-")
}

fn parse_line(line: &str) -> Result<String, String> {
    if line.len() > MAX_LINE {
        return Err(format!("longer than {MAX_LINE} bytes"));
    }
    if line.chars().any(|c| c.is_control() && c != '\t') {
        return Err("contains control characters".into());
    }
    let first = line.split_whitespace().next().unwrap_or("");
    let (options, key) = if is_key_type(first) {
        ("", line)
    } else {
        split_options(line)?
    };
    let key = ssh_key::PublicKey::from_openssh(key)
        .map_err(|e| format!("not an OpenSSH public key ({e})"))?;
    let encoded = key
        .to_openssh()
        .map_err(|e| format!("the key cannot be written back ({e})"))?;
    Ok(if options.is_empty() {
        encoded
    } else {
        format!("{options} {encoded}")
    })
}

/// Splits `options key...` at the first blank outside double quotes.
fn split_options(line: &str) -> Result<(&str, &str), String> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ' ' | '\t' if !quoted => {
                let key = line[i..].trim_start();
                if !key.split_whitespace().next().is_some_and(is_key_type) {
                    return Err(
                        "no key type (ssh-ed25519, ssh-rsa, ecdsa-sha2-...) after the options"
                            .into(),
                    );
                }
                return Ok((&line[..i], key));
            }
            _ => {}
        }
    }
    Err(if quoted {
        "an option's quote is not closed".into()
    } else {
        "no key after the options".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    #[test]
    fn keys_with_and_without_options_and_comments_are_kept() {
        let text = format!(
            "# uploaded keys\n\n{ED} alice@laptop\r\nno-pty,command=\"echo hi there\" {ED}\nfrom=\"10.0.0.0/8\" {ED} bob\n"
        );
        let parsed = parse(&text);
        assert_eq!(parsed.skipped, []);
        assert_eq!(
            parsed.lines,
            [
                format!("{ED} alice@laptop"),
                format!("no-pty,command=\"echo hi there\" {ED}"),
                format!("from=\"10.0.0.0/8\" {ED} bob"),
            ]
        );
        assert!(parsed.render().ends_with(" bob\n"));
    }

    #[test]
    fn bad_lines_are_skipped_with_their_line_numbers_and_the_good_ones_kept() {
        let text = format!(
            "{ED} good\nssh-ed25519 AAAAgarbage\nhello world\nno-pty {ED}\ncommand=\"unclosed {ED}\nssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7\n{ED}\u{7} bell\n"
        );
        let parsed = parse(&text);
        assert_eq!(parsed.lines, [format!("{ED} good"), format!("no-pty {ED}")]);
        let numbers: Vec<usize> = parsed.skipped.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [2, 3, 5, 6, 7], "{:?}", parsed.skipped);
        assert!(parsed.skipped[0].1.contains("not an OpenSSH public key"));
        assert!(parsed.skipped[2].1.contains("quote is not closed"));
        assert!(parsed.skipped[4].1.contains("control characters"));
        assert!(!parsed.render().contains("garbage"));
    }

    #[test]
    fn an_empty_source_makes_an_empty_file() {
        assert_eq!(parse("").render(), "");
        assert_eq!(parse("\n# nothing\n").render(), "");
    }
}
