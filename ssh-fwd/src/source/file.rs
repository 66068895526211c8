//! The static mappings file as a source of desired state:
//!
//! ```yaml
//! mappings:
//!   - name: job-4711          # optional label, shown by `ssh-fwd list`
//!     frontend: 198.18.0.10:8022
//!     backend: 10.244.1.5:22
//! ```
//!
//! Parsed with `serde-saphyr`: a pure-Rust YAML parser (no `unsafe-libyaml`)
//! with limits on nesting and alias expansion, maintained, and the one
//! kube-rs itself uses. `serde_yaml` is deprecated and unmaintained.

use std::{
    collections::BTreeMap,
    net::{SocketAddr, SocketAddrV4},
    path::Path,
};

use serde::Deserialize;
use ssh_fwd_common::maps::MAX_NAME_LEN;

use crate::mapping::{Mapping, MappingSet};

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
    #[error("mappings file {path} is not valid: {cause}")]
    Syntax {
        path: String,
        cause: Box<serde_saphyr::Error>,
    },
    #[error("mappings file {path}, entry #{index}{label}: {problem}")]
    Entry {
        path: String,
        index: usize,
        label: String,
        problem: EntryProblem,
    },
    #[error(
        "mappings file {path}: entries #{first} and #{second} both use frontend {frontend}; \
         a frontend (IP:port) may appear only once"
    )]
    DuplicateFrontend {
        path: String,
        first: usize,
        second: usize,
        frontend: SocketAddrV4,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryProblem {
    #[error("{field} `{value}` is not an IPv4 address with a port, like 198.18.0.10:8022")]
    BadAddress { field: &'static str, value: String },
    #[error("{field} `{value}` is IPv6; ssh-fwd forwards IPv4 only")]
    Ipv6 { field: &'static str, value: String },
    #[error("{field} `{value}` has port 0; use a port between 1 and 65535")]
    PortZero { field: &'static str, value: String },
    #[error("{field} `{value}` is not a unicast address")]
    NotUnicast { field: &'static str, value: String },
    #[error("name is {len} bytes long; keep it at most {MAX_NAME_LEN}")]
    NameTooLong { len: usize },
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
}

/// Reads and validates a mappings file. Either every entry is valid and the
/// whole set is returned, or nothing is.
pub fn load_file(path: &Path) -> Result<MappingSet, FileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|cause| FileError::Read {
        path: shown.clone(),
        cause,
    })?;
    parse(&text, &shown)
}

/// Parses mappings-file text; `path` is only used in messages.
pub fn parse(text: &str, path: &str) -> Result<MappingSet, FileError> {
    // An editor or a half-finished write can leave a file empty for a moment;
    // treating that as "no mappings" would cut every session.
    if text.trim().is_empty() {
        return Err(FileError::Empty { path: path.into() });
    }
    let doc: FileDoc = serde_saphyr::from_str(text).map_err(|cause| FileError::Syntax {
        path: path.into(),
        cause: Box::new(cause),
    })?;
    let mut seen: BTreeMap<SocketAddrV4, usize> = BTreeMap::new();
    let mut mappings = Vec::with_capacity(doc.mappings.len());
    for (i, entry) in doc.mappings.into_iter().enumerate() {
        let index = i + 1;
        let name = entry.name.unwrap_or_default();
        let entry_error = |problem| FileError::Entry {
            path: path.into(),
            index,
            label: if name.is_empty() {
                String::new()
            } else {
                format!(" ({name})")
            },
            problem,
        };
        if name.len() > MAX_NAME_LEN {
            return Err(entry_error(EntryProblem::NameTooLong { len: name.len() }));
        }
        let frontend = parse_endpoint("frontend", &entry.frontend).map_err(&entry_error)?;
        let backend = parse_endpoint("backend", &entry.backend).map_err(&entry_error)?;
        if let Some(first) = seen.insert(frontend, index) {
            return Err(FileError::DuplicateFrontend {
                path: path.into(),
                first,
                second: index,
                frontend,
            });
        }
        mappings.push(Mapping {
            name,
            frontend,
            backend,
        });
    }
    Ok(MappingSet::from_unique(mappings))
}

/// Parses `IP:PORT` for one field of an entry.
pub fn parse_endpoint(field: &'static str, value: &str) -> Result<SocketAddrV4, EntryProblem> {
    let addr: SocketAddr = value.trim().parse().map_err(|_| EntryProblem::BadAddress {
        field,
        value: value.into(),
    })?;
    let SocketAddr::V4(addr) = addr else {
        return Err(EntryProblem::Ipv6 {
            field,
            value: value.into(),
        });
    };
    if addr.port() == 0 {
        return Err(EntryProblem::PortZero {
            field,
            value: value.into(),
        });
    }
    let ip = addr.ip();
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
        return Err(EntryProblem::NotUnicast {
            field,
            value: value.into(),
        });
    }
    Ok(addr)
}

#[cfg(test)]
mod tests;
