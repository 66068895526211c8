//! The families as kube-apiserver 1.36 defaults and refuses them
//! (`initIPFamilyFields`, `ValidateServiceClusterIPsRelatedFields`,
//! `validateUpgradeDowngradeIPFamilies`), one rule a test.

use serde_json::{Value, json};

use super::*;

fn service(families: Option<&[&str]>, policy: Option<&str>) -> Value {
    let mut s = json!({"metadata": {"name": "ssh-a", "namespace": "jobs"},
                       "spec": {"selector": {"app": "a"}, "ports": [{"port": 22}]}});
    if let Some(families) = families {
        s["spec"]["ipFamilies"] = json!(families);
    }
    if let Some(policy) = policy {
        s["spec"]["ipFamilyPolicy"] = json!(policy);
    }
    s
}

/// The families and policy `service` is created with on `cluster`.
fn created(cluster: &ClusterFamilies, families: Option<&[&str]>, policy: Option<&str>) -> Value {
    let mut s = service(families, policy);
    init(&mut s, None, cluster).expect("created");
    json!([s["spec"]["ipFamilies"], s["spec"]["ipFamilyPolicy"]])
}

fn refused(cluster: &ClusterFamilies, families: Option<&[&str]>, policy: Option<&str>) -> String {
    let mut s = service(families, policy);
    let error = init(&mut s, None, cluster).expect_err("refused");
    assert_eq!((error.code, error.reason), (422, "Invalid"));
    error.message
}

#[test]
fn a_service_without_families_gets_the_primary_one_single_stack() {
    let v4 = ClusterFamilies::default();
    assert_eq!(created(&v4, None, None), json!([["IPv4"], "SingleStack"]));
    let dual6 = ClusterFamilies::dual(IpFamily::Ipv6);
    assert_eq!(
        created(&dual6, None, None),
        json!([["IPv6"], "SingleStack"])
    );
}

#[test]
fn prefer_dual_stack_gets_both_families_on_a_dual_stack_cluster_and_one_elsewhere() {
    let dual = ClusterFamilies::dual(IpFamily::Ipv4);
    let prefer = Some("PreferDualStack");
    assert_eq!(
        created(&dual, None, prefer),
        json!([["IPv4", "IPv6"], "PreferDualStack"])
    );
    assert_eq!(
        created(&dual, Some(&["IPv6"]), prefer),
        json!([["IPv6", "IPv4"], "PreferDualStack"]),
        "the family asked for first stays first"
    );
    let v4 = ClusterFamilies::default();
    assert_eq!(
        created(&v4, None, prefer),
        json!([["IPv4"], "PreferDualStack"])
    );
}

#[test]
fn require_dual_stack_is_refused_on_a_single_stack_cluster() {
    let message = refused(&ClusterFamilies::default(), None, Some("RequireDualStack"));
    assert_eq!(
        message,
        "Service \"ssh-a\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": \
         this cluster is not configured for dual-stack services"
    );
    let dual = ClusterFamilies::dual(IpFamily::Ipv4);
    assert_eq!(
        created(&dual, None, Some("RequireDualStack")),
        json!([["IPv4", "IPv6"], "RequireDualStack"])
    );
}

#[test]
fn two_families_need_a_dual_stack_policy_even_when_none_is_given() {
    // No policy on a create defaults to SingleStack, which two families
    // contradict.
    let dual = ClusterFamilies::dual(IpFamily::Ipv4);
    for policy in [None, Some("SingleStack")] {
        assert_eq!(
            refused(&dual, Some(&["IPv4", "IPv6"]), policy),
            "Service \"ssh-a\" is invalid: spec.ipFamilyPolicy: Invalid value: \"SingleStack\": \
             must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are \
             specified"
        );
    }
}

#[test]
fn a_family_the_cluster_lacks_is_refused_by_its_index() {
    let v6 = ClusterFamilies::single(IpFamily::Ipv6);
    assert_eq!(
        refused(&v6, Some(&["IPv4"]), None),
        "Service \"ssh-a\" is invalid: spec.ipFamilies[0]: Invalid value: \"IPv4\": not \
         configured on this cluster"
    );
    let message = refused(&v6, Some(&["IPv6", "IPv4"]), Some("PreferDualStack"));
    assert!(
        message.ends_with(
            "spec.ipFamilies[1]: Invalid value: \"IPv4\": not configured on this cluster"
        ),
        "{message}"
    );
}

#[test]
fn unknown_or_repeated_values_are_refused() {
    let dual = ClusterFamilies::dual(IpFamily::Ipv4);
    assert!(refused(&dual, Some(&["IPv5"]), None).ends_with(
        "spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\""
    ));
    assert!(
        refused(&dual, Some(&["IPv4", "IPv4"]), Some("PreferDualStack"))
            .ends_with("spec.ipFamilies[1]: Duplicate value: \"IPv4\"")
    );
    assert!(refused(&dual, None, Some("DualStack")).contains(
        "spec.ipFamilyPolicy: Unsupported value: \"DualStack\": supported values: \
         \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""
    ));
}

#[test]
fn an_external_name_service_gets_no_families() {
    let mut s = json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName"}});
    init(&mut s, None, &ClusterFamilies::default()).unwrap();
    assert!(s["spec"]["ipFamilies"].is_null() && s["spec"]["ipFamilyPolicy"].is_null());
}

#[test]
fn external_ips_are_not_checked_against_the_families() {
    let mut s = service(Some(&["IPv4"]), None);
    s["spec"]["externalIPs"] = json!(["2001:db8::10"]);
    init(&mut s, None, &ClusterFamilies::default()).expect("taken");
}

fn updated(old: &Value, change: impl FnOnce(&mut Value)) -> Result<Value, String> {
    let mut next = old.clone();
    change(&mut next);
    let cluster = ClusterFamilies::dual(IpFamily::Ipv4);
    init(&mut next, Some(old), &cluster).map_err(|e| e.message)?;
    Ok(json!([
        next["spec"]["ipFamilies"],
        next["spec"]["ipFamilyPolicy"]
    ]))
}

#[test]
fn on_update_the_first_family_never_changes_and_the_second_goes_only_with_single_stack() {
    let mut old = service(None, Some("PreferDualStack"));
    init(&mut old, None, &ClusterFamilies::dual(IpFamily::Ipv4)).unwrap();
    let message = updated(&old, |s| s["spec"]["ipFamilies"] = json!(["IPv6", "IPv4"])).unwrap_err();
    assert!(
        message.ends_with(
            "spec.ipFamilies[0]: Invalid value: []core.IPFamily{\"IPv6\", \"IPv4\"}: may not \
             change once set"
        ),
        "{message}"
    );
    let message = updated(&old, |s| s["spec"]["ipFamilies"] = json!(["IPv4"])).unwrap_err();
    assert!(
        message.ends_with("must be 'SingleStack' to release the secondary IP family"),
        "{message}"
    );
    assert_eq!(
        updated(&old, |s| s["spec"]["ipFamilyPolicy"] = json!("SingleStack")),
        Ok(json!([["IPv4"], "SingleStack"])),
        "SingleStack with the families as they were drops the second"
    );
    assert_eq!(
        updated(&old, |s| {
            let spec = s["spec"].as_object_mut().unwrap();
            spec.remove("ipFamilies");
            spec.remove("ipFamilyPolicy");
        }),
        Ok(json!([["IPv4", "IPv6"], "PreferDualStack"])),
        "a spec written without them keeps them"
    );
}
