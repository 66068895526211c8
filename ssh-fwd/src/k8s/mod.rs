//! Kubernetes plumbing the agent's source and the controller share: the
//! client, reflectors, the grant the controller writes and the rule that
//! decides which Service owns a port, and
//! the list of every API call made (which the RBAC in deploy/ must grant).

pub mod activity;
pub mod answer;
pub mod api_calls;
pub mod client;
pub mod grant;
pub mod kept;
pub mod label_selector;
pub mod lease;
pub mod ownership;
pub mod reflector;
pub mod selector_check;
pub mod served;
