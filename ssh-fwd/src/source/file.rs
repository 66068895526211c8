//! The static mappings file as a source of desired state:
//!
//! ```yaml
//! mappings:
//!   - name: job-4711          # optional label, shown by `ssh-fwd list`
//!     frontend: 198.18.0.10:8022
//!     backend: 10.244.1.5:22
//!     allow: [192.0.2.0/24]   # optional: only these clients (`[]`: all)
//!   - name: job-4712          # IPv6: frontend and backend of one family
//!     frontend: "[2001:db8::10]:8022"
//!     backend: "[fd00:10:244::5]:22"
//! ```
//!
//! Parsed with `serde-saphyr`: a pure-Rust YAML parser (no `unsafe-libyaml`)
//! with limits on nesting and alias expansion, maintained, and the one
//! kube-rs itself uses. `serde_yaml` is deprecated and unmaintained.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    path::Path,
};

use serde::Deserialize;
use ssh_fwd_common::maps::MAX_NAME_LEN;

use super::validate::{Checker, Danger, Rules};
use crate::mapping::{
    Family, Guard, Mapping, MappingSet,
    guard::{Allow, Cidr, RangesError, parse_ranges},
    printable,
};

/// Why a mappings file was rejected. Every variant names the entry (1-based,
/// as a person counts them in the file) and says what to change.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    // The cause is in the message, not a `source`: `{:#}` would repeat it.
    #[error("cannot read mappings file {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error(
        "mappings file {path} is empty; write `mappings: []` to remove all mappings on purpose"
    )]
    Empty { path: String },
    // The parser's message may quote the file: escaped.
    #[error("mappings file {path} is not valid: {}{hint}", printable(&cause.to_string()))]
    Syntax {
        path: String,
        cause: Box<serde_saphyr::Error>,
        /// What the parser cannot say: empty, or a fix that starts with `; `.
        hint: String,
    },
    #[error("mappings file {path}, entry #{index}{label}: {problem}")]
    Entry {
        path: String,
        index: usize,
        label: String,
        // Boxed: the addresses of both families it may quote make it big.
        problem: Box<EntryProblem>,
    },
    #[error(
        "mappings file {path}: entries #{first} and #{second} both use frontend {frontend}; \
         a frontend (IP:port) may appear only once"
    )]
    DuplicateFrontend {
        path: String,
        first: usize,
        second: usize,
        frontend: SocketAddr,
    },
    #[error(
        "mappings file {path} lists {count} mappings, {excess} more than this node holds \
         (--max-mappings {capacity}): entries #{first_over} to #{count} do not fit; remove \
         {excess} entries, or raise --max-mappings (after `ssh-fwd teardown`)"
    )]
    TooMany {
        path: String,
        count: usize,
        capacity: usize,
        excess: usize,
        first_over: usize,
    },
}

/// A problem with one entry. Values quoted from the file are escaped
/// ([`printable`]) when the problem is made: they reach terminals, logs and
/// `ssh-fwd status`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryProblem {
    #[error(
        "{field} `{value}` is not an address with a port, like 198.18.0.10:8022 or \
         [2001:db8::10]:8022"
    )]
    BadAddress { field: &'static str, value: String },
    #[error(
        "frontend {frontend} is {} and backend {backend} is {}; ssh-fwd translates addresses, \
         not families (no NAT46 or NAT64): give the entry a frontend of the backend's family, \
         or point it at the pod's {} address",
        Family::of(frontend.ip()),
        Family::of(backend.ip()),
        Family::of(frontend.ip())
    )]
    MixedFamily {
        frontend: SocketAddr,
        backend: SocketAddr,
    },
    #[error(
        "allow: range {range} is {} but frontend {frontend} is {}; list {} ranges for this \
         frontend, and give {} clients an entry with an {} frontend",
        range.family(),
        Family::of(frontend.ip()),
        Family::of(frontend.ip()),
        range.family(),
        range.family()
    )]
    AllowFamily { range: Cidr, frontend: SocketAddr },
    #[error("{field} `{value}` has port 0; use a port between 1 and 65535")]
    PortZero { field: &'static str, value: String },
    #[error("{field} `{value}` is not a unicast address")]
    NotUnicast { field: &'static str, value: String },
    #[error("name is {len} bytes long; keep it at most {MAX_NAME_LEN}")]
    NameTooLong { len: usize },
    #[error("allow: {0}")]
    Allow(RangesError),
    #[error(transparent)]
    Dangerous(#[from] Danger),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    mappings: Vec<FileEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    #[serde(default)]
    name: Option<String>,
    frontend: String,
    backend: String,
    /// Absent: the agent's `--allow`; `[]`: every source.
    #[serde(default)]
    allow: Option<Vec<String>>,
}

/// Validates a mappings file as read (its bytes, or why it could not be
/// read) against `rules`. Either every entry is valid and the whole set is
/// returned, or nothing is. The agent reads a file once, waits for it to
/// stay the same, and parses the very bytes it compared.
pub fn parse_read(
    read: Result<&[u8], std::io::Error>,
    path: &Path,
    rules: &Rules,
    capacity: usize,
) -> Result<MappingSet, FileError> {
    let shown = path.display().to_string();
    let text = read
        .and_then(|bytes| {
            std::str::from_utf8(bytes).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "stream did not contain valid UTF-8",
                )
            })
        })
        .map_err(|cause| FileError::Read {
            path: shown.clone(),
            cause,
        })?;
    parse(text, &shown, rules, capacity)
}

/// An I/O error again, for a second report of it.
pub fn clone_io(e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), e.to_string())
}

/// The first `frontend:` or `backend:` in `text` whose value is an
/// unquoted `[...]`, and that value: an IPv6 endpoint YAML took for a list.
fn unquoted_ipv6(text: &str) -> Option<(&'static str, &str)> {
    ["frontend", "backend"]
        .into_iter()
        .filter_map(|field| {
            text.match_indices(&format!("{field}:"))
                .find_map(|(at, key)| {
                    let value = text[at + key.len()..].trim_start_matches([' ', '\t']);
                    let end = value
                        .find([' ', '\t', '\n', ',', '}'])
                        .unwrap_or(value.len());
                    let value = &value[..end];
                    (value.starts_with('[') && value.contains("]:")).then_some((at, field, value))
                })
        })
        .min_by_key(|(at, _, _)| *at)
        .map(|(_, field, value)| (field, value))
}

/// Parses mappings-file text; `path` is only used in messages. More than
/// `capacity` mappings (the node's `--max-mappings`) are refused whole.
pub fn parse(
    text: &str,
    path: &str,
    rules: &Rules,
    capacity: usize,
) -> Result<MappingSet, FileError> {
    // An editor or a half-finished write can leave a file empty for a moment;
    // treating that as "no mappings" would cut every session.
    if text.trim().is_empty() {
        return Err(FileError::Empty { path: path.into() });
    }
    let doc: FileDoc = serde_saphyr::from_str(text).map_err(|cause| FileError::Syntax {
        path: path.into(),
        cause: Box::new(cause),
        hint: unquoted_ipv6(text)
            .map(|(field, value)| {
                format!(
                    "; YAML reads an unquoted [...] as a list: quote an IPv6 endpoint, as in \
                     {field}: '{}'",
                    printable(value)
                )
            })
            .unwrap_or_default(),
    })?;
    let mut seen: BTreeMap<SocketAddr, usize> = BTreeMap::new();
    let mut mappings = Vec::with_capacity(doc.mappings.len());
    for (i, entry) in doc.mappings.into_iter().enumerate() {
        let index = i + 1;
        let name = entry.name.unwrap_or_default();
        let fail = |problem| entry_error(path, index, &name, problem);
        if name.len() > MAX_NAME_LEN {
            return Err(fail(EntryProblem::NameTooLong { len: name.len() }));
        }
        let frontend = parse_endpoint("frontend", &entry.frontend).map_err(&fail)?;
        let backend = parse_endpoint("backend", &entry.backend).map_err(&fail)?;
        let family = Family::of(frontend.ip());
        if Family::of(backend.ip()) != family {
            return Err(fail(EntryProblem::MixedFamily { frontend, backend }));
        }
        let allow = match &entry.allow {
            None => Allow::Default,
            Some(list) if list.is_empty() => Allow::Open,
            Some(list) => {
                let ranges = parse_ranges(list.iter().map(String::as_str))
                    .map_err(|e| fail(EntryProblem::Allow(e)))?;
                if let Some(range) = ranges.iter().find(|r| r.family() != family) {
                    return Err(fail(EntryProblem::AllowFamily {
                        range: *range,
                        frontend,
                    }));
                }
                Allow::Only(ranges)
            }
        };
        if let Some(first) = seen.insert(frontend, index) {
            return Err(FileError::DuplicateFrontend {
                path: path.into(),
                first,
                second: index,
                frontend,
            });
        }
        let guard = Guard {
            allow,
            ..Guard::default()
        };
        mappings.push(Mapping {
            name: name.into(),
            frontend,
            backend,
            guard: rules.guard.resolve(&guard, family),
        });
    }
    if mappings.len() > capacity {
        return Err(FileError::TooMany {
            path: path.into(),
            count: mappings.len(),
            capacity,
            excess: mappings.len() - capacity,
            first_over: capacity + 1,
        });
    }
    let checker = Checker::new(rules, mappings.iter().map(|m| m.frontend));
    for (i, m) in mappings.iter().enumerate() {
        checker
            .check(m)
            .map_err(|d| entry_error(path, i + 1, &m.name, d.into()))?;
    }
    Ok(MappingSet::from_unique(mappings))
}

/// An entry's error, its name shown with control characters escaped.
fn entry_error(path: &str, index: usize, name: &str, problem: EntryProblem) -> FileError {
    FileError::Entry {
        path: path.into(),
        index,
        label: if name.is_empty() {
            String::new()
        } else {
            format!(" ({})", printable(name))
        },
        problem: Box::new(problem),
    }
}

/// Parses `IP:PORT` (`[IPv6]:PORT`) for one field of an entry.
pub fn parse_endpoint(field: &'static str, value: &str) -> Result<SocketAddr, EntryProblem> {
    let addr: SocketAddr = value.trim().parse().map_err(|_| EntryProblem::BadAddress {
        field,
        value: printable(value),
    })?;
    if addr.port() == 0 {
        return Err(EntryProblem::PortZero {
            field,
            value: printable(value),
        });
    }
    let not_unicast = match addr.ip() {
        IpAddr::V4(ip) => ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast(),
        IpAddr::V6(ip) => ip.is_unspecified() || ip.is_multicast(),
    };
    // The other ranges that are never a frontend or a backend (loopback,
    // link-local, 0/8) are judged by `validate`, which says what each is.
    if field == "frontend" && not_unicast {
        return Err(EntryProblem::NotUnicast {
            field,
            value: printable(value),
        });
    }
    Ok(addr)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod v6_tests;
