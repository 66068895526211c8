//! Kubernetes as the source of desired state: Services (legacy
//! `spec.externalIPs`, or type LoadBalancer of ssh-fwd's class) and their
//! EndpointSlices, watched into caches ([`watch`]) and turned into mappings by
//! a pure function ([`desired`]).

pub mod desired;
pub mod watch;
