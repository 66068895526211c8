//! A Service's IP families as kube-apiserver fills them in and checks them
//! on a create or an update of its spec, for a cluster configured with one
//! service family or two (its `--service-cluster-ip-range`s): what
//! `initIPFamilyFields` does (kubernetes/kubernetes,
//! `pkg/registry/core/service/storage/alloc.go`), with the checks of
//! `ValidateServiceClusterIPsRelatedFields` and
//! `validateUpgradeDowngradeIPFamilies`
//! (`pkg/apis/core/validation/validation.go`) that concern the families.
//! Cluster IPs are not emulated, so neither are their rules. The API server
//! does not check `spec.externalIPs` or `status.loadBalancer.ingress`
//! against the families, and neither does this.

use serde_json::{Value, json};

use super::{endpoints::IpFamily, status::ApiError};

const SINGLE: &str = "SingleStack";
const PREFER: &str = "PreferDualStack";
const REQUIRE: &str = "RequireDualStack";

/// The service families a cluster is configured with, its primary first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFamilies(Vec<IpFamily>);

impl Default for ClusterFamilies {
    fn default() -> Self {
        Self(vec![IpFamily::Ipv4])
    }
}

impl ClusterFamilies {
    /// A single-stack cluster of `family`.
    pub fn single(family: IpFamily) -> Self {
        Self(vec![family])
    }

    /// A dual-stack cluster whose primary family is `primary`.
    pub fn dual(primary: IpFamily) -> Self {
        Self(vec![primary, other(primary)])
    }

    fn primary(&self) -> IpFamily {
        self.0[0]
    }

    fn has(&self, family: &str) -> bool {
        self.0.iter().any(|f| f.name() == family)
    }

    fn is_dual(&self) -> bool {
        self.0.len() == 2
    }
}

fn other(family: IpFamily) -> IpFamily {
    match family {
        IpFamily::Ipv4 => IpFamily::Ipv6,
        IpFamily::Ipv6 => IpFamily::Ipv4,
    }
}

/// Fills in and checks the families of `service`, being created (`old`:
/// `None`) or updated; `Err`: the 422 the API server answers.
pub fn init(
    service: &mut Value,
    old: Option<&Value>,
    cluster: &ClusterFamilies,
) -> Result<(), ApiError> {
    if service["spec"]["type"] == "ExternalName" {
        return Ok(());
    }
    let name = service["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let refuse = |causes: Vec<String>| invalid(&name, causes);
    if let Some(old) = old {
        // Cluster IPs are kept on an update (`patchAllocatedValues`), and
        // the families inferred from them again: omitted, they stay.
        if service["spec"]["ipFamilies"].is_null() {
            service["spec"]["ipFamilies"] = old["spec"]["ipFamilies"].clone();
        }
        if service["spec"]["ipFamilyPolicy"].is_null() {
            service["spec"]["ipFamilyPolicy"] = old["spec"]["ipFamilyPolicy"].clone();
        }
    }
    let headless_selectorless = service["spec"]["clusterIP"] == "None"
        && service["spec"]["selector"]
            .as_object()
            .is_none_or(|s| s.is_empty());
    if service["spec"]["ipFamilyPolicy"].is_null() {
        let policy = if headless_selectorless {
            REQUIRE
        } else {
            SINGLE
        };
        service["spec"]["ipFamilyPolicy"] = json!(policy);
    }
    let policy = service["spec"]["ipFamilyPolicy"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let mut families: Vec<String> = (service["spec"]["ipFamilies"].as_array().into_iter())
        .flatten()
        .map(|f| f.as_str().unwrap_or("").to_owned())
        .collect();
    refuse(standalone(&families, &policy))?;
    let mut causes = Vec::new();
    if let Some(old) = old {
        causes.extend(upgrade_downgrade(old, &mut families, &policy));
    }
    if policy == SINGLE && families.len() == 2 {
        causes.push(format!(
            "spec.ipFamilyPolicy: Invalid value: \"{SINGLE}\": must be 'RequireDualStack' or \
             'PreferDualStack' when multiple IP families are specified"
        ));
    }
    refuse(causes)?;
    if headless_selectorless {
        if families.is_empty() {
            families.push(cluster.primary().name().into());
        }
        if families.len() < 2 && policy != SINGLE {
            families.push(other_name(&families[0]).into());
        }
        service["spec"]["ipFamilies"] = json!(families);
        return Ok(());
    }
    let mut causes = Vec::new();
    if policy == REQUIRE && !cluster.is_dual() {
        causes.push(format!(
            "spec.ipFamilyPolicy: Invalid value: \"{REQUIRE}\": this cluster is not configured \
             for dual-stack services"
        ));
    }
    for (i, family) in families.iter().enumerate() {
        if !cluster.has(family) {
            causes.push(format!(
                "spec.ipFamilies[{i}]: Invalid value: \"{family}\": not configured on this cluster"
            ));
        }
    }
    refuse(causes)?;
    if families.is_empty() {
        families.push(cluster.primary().name().into());
    }
    if policy != SINGLE && families.len() == 1 && cluster.is_dual() {
        families.push(other_name(&families[0]).into());
    }
    service["spec"]["ipFamilies"] = json!(families);
    Ok(())
}

fn other_name(family: &str) -> &'static str {
    if family == IpFamily::Ipv4.name() {
        IpFamily::Ipv6.name()
    } else {
        IpFamily::Ipv4.name()
    }
}

/// The families' and the policy's own values: known, and no family twice.
fn standalone(families: &[String], policy: &str) -> Vec<String> {
    let mut causes = Vec::new();
    for (i, family) in families.iter().enumerate() {
        if !IpFamily::ALL.iter().any(|f| f.name() == family) {
            causes.push(format!(
                "spec.ipFamilies[{i}]: Unsupported value: \"{family}\": supported values: \
                 \"IPv4\", \"IPv6\""
            ));
        } else if families[..i].contains(family) {
            causes.push(format!(
                "spec.ipFamilies[{i}]: Duplicate value: \"{family}\""
            ));
        }
    }
    if ![SINGLE, PREFER, REQUIRE].contains(&policy) {
        causes.push(format!(
            "spec.ipFamilyPolicy: Unsupported value: \"{policy}\": supported values: \
             \"{PREFER}\", \"{REQUIRE}\", \"{SINGLE}\""
        ));
    }
    causes
}

/// An update's changes of the families: the first never changes; the
/// second goes only with `SingleStack` (which, with the families left as
/// they were, drops it).
fn upgrade_downgrade(old: &Value, families: &mut Vec<String>, policy: &str) -> Vec<String> {
    let before: Vec<&str> = (old["spec"]["ipFamilies"].as_array().into_iter())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if policy == SINGLE && *families == before && families.len() > 1 {
        families.truncate(1);
    }
    let mut causes = Vec::new();
    if let (Some(first), Some(was)) = (families.first(), before.first())
        && first != was
    {
        causes.push(format!(
            "spec.ipFamilies[0]: Invalid value: {}: may not change once set",
            go_families(families)
        ));
    }
    if families.len() < before.len() && policy != SINGLE {
        causes.push(format!(
            "spec.ipFamilyPolicy: Invalid value: \"{policy}\": must be 'SingleStack' to release \
             the secondary IP family"
        ));
    }
    causes
}

/// A list of families as the API server prints a bad value of that type
/// (`%#v` of its internal type).
fn go_families(families: &[String]) -> String {
    let quoted: Vec<String> = families.iter().map(|f| format!("{f:?}")).collect();
    format!("[]core.IPFamily{{{}}}", quoted.join(", "))
}

fn invalid(name: &str, causes: Vec<String>) -> Result<(), ApiError> {
    let causes = match causes.as_slice() {
        [] => return Ok(()),
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    Err(ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("Service \"{name}\" is invalid: {causes}"),
    })
}

#[cfg(test)]
mod tests;
