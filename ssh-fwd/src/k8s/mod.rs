//! Kubernetes as the source of mappings: which Services count and what they
//! map to. The watch machinery builds on this pure core.

#[cfg(test)]
pub mod api_calls;
pub mod client;
pub mod desired;
pub mod selector;
pub mod source;
