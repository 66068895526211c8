//! Where the desired mappings come from: a static file ([`file`]) or the
//! Kubernetes API ([`kubernetes`]). Each produces a
//! [`MappingSet`](crate::mapping::MappingSet); neither knows about the data
//! path that installs it.

pub mod file;
pub mod kubernetes;
pub mod validate;
