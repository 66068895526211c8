//! Kubernetes as the source of desired state: Services (legacy
//! `spec.externalIPs`, or type LoadBalancer of ssh-fwd's class) and their
//! EndpointSlices, read off the wire into small views ([`objects`]), kept
//! as an incrementally updated desired state ([`index`]) by the watches
//! ([`watch`]), with the rules as pure functions ([`desired`]).

pub mod desired;
pub mod index;
pub mod objects;
pub mod watch;
