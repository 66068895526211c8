//! Which Service owns a port on an SSH IP when several claim it. The agents
//! and the controller apply this same rule, so they always agree on the
//! winner whatever order events arrive in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The order in which Services claiming one address and port win: oldest
/// first, a missing timestamp last, then by `namespace/name`. The controller
/// uses the same order, so agents and controller agree on the winner.
pub fn seniority<'a>(
    created: &'a Option<Time>,
    service: &'a str,
) -> (bool, &'a Option<Time>, &'a str) {
    (created.is_none(), created, service)
}
