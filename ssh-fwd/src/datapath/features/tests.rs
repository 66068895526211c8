use super::*;

const AUTO: Asked = Asked {
    xdp_only: false,
    hairpin: true,
};

fn without(features: &[Feature]) -> Probed {
    let mut probed = Probed::all_present();
    for f in features {
        probed.set(*f, false);
    }
    probed
}

#[test]
fn a_kernel_with_everything_runs_tcx_xdp_and_hairpin_and_reports_nothing_missing() {
    let plan = plan(&Probed::all_present(), AUTO).unwrap();
    assert_eq!(plan.tc, TcMechanism::Tcx);
    assert!(plan.xdp && plan.hairpin);
    assert!(plan.missing.is_empty());
}

#[test]
fn without_tcx_the_tc_programs_attach_through_clsact_and_nothing_else_changes() {
    let plan = plan(&without(&[Feature::Tcx]), AUTO).unwrap();
    assert_eq!(plan.tc, TcMechanism::Clsact);
    assert!(plan.xdp && plan.hairpin);
    assert_eq!(plan.missing, vec![(Feature::Tcx, Fallback::Clsact)]);
}

#[test]
fn without_xdp_links_or_helpers_auto_takes_tc_and_an_xdp_only_mode_is_refused() {
    for feature in [Feature::XdpLink, Feature::XdpHelpers] {
        let probed = without(&[feature]);
        let plan = plan(&probed, AUTO).unwrap();
        assert!(!plan.xdp, "{feature}");
        assert_eq!(plan.tc, TcMechanism::Tcx);
        let asked = Asked {
            xdp_only: true,
            hairpin: false,
        };
        let refused = super::plan(&probed, asked).unwrap_err();
        assert_eq!(refused, Refusal::NoXdp(feature));
        assert!(refused.to_string().contains("use --attach tc"), "{refused}");
    }
}

#[test]
fn without_any_cgroup_hook_or_helper_hairpin_is_off_and_forwarding_stays() {
    for feature in [
        Feature::CgroupConnect,
        Feature::CgroupGetpeername,
        Feature::HairpinHelpers,
    ] {
        let plan = plan(&without(&[feature]), AUTO).unwrap();
        assert!(!plan.hairpin, "{feature}");
        assert!(plan.xdp);
        assert_eq!(plan.missing, vec![(feature, Fallback::NoHairpin)]);
    }
}

#[test]
fn hairpin_not_asked_for_stays_off_on_any_kernel() {
    let asked = Asked {
        xdp_only: false,
        hairpin: false,
    };
    assert!(!plan(&Probed::all_present(), asked).unwrap().hairpin);
}

#[test]
fn what_the_programs_or_maps_cannot_load_without_refuses_naming_the_feature_and_release() {
    for feature in [
        Feature::RingBuffer,
        Feature::BatchMapOps,
        Feature::PerCpuLru,
        Feature::TcHelpers,
    ] {
        let refused = plan(&without(&[feature, Feature::Tcx]), AUTO).unwrap_err();
        assert_eq!(refused, Refusal::Required(feature));
        let text = refused.to_string();
        assert!(text.contains(feature.name()), "{text}");
        assert!(text.contains(feature.since()), "{text}");
        assert!(text.contains("docs/kernels.md"), "{text}");
    }
}

#[test]
fn every_missing_feature_is_listed_with_what_it_costs() {
    let plan = plan(
        &without(&[Feature::Tcx, Feature::XdpLink, Feature::CgroupGetpeername]),
        AUTO,
    )
    .unwrap();
    let names: Vec<&str> = plan.missing.iter().map(|(f, _)| f.name()).collect();
    assert_eq!(names, ["tcx", "xdp_link", "cgroup_getpeername"]);
    for (_, fallback) in &plan.missing {
        assert!(!fallback.lost().is_empty());
    }
}

#[test]
fn features_are_pretended_missing_by_name_and_an_unknown_name_lists_the_known() {
    let mut probed = Probed::all_present();
    let named = probed.pretend_missing("tcx, xdp_link").unwrap();
    assert_eq!(named, [Feature::Tcx, Feature::XdpLink]);
    assert!(!probed.has(Feature::Tcx) && !probed.has(Feature::XdpLink));
    assert!(probed.has(Feature::RingBuffer));
    let err = probed.pretend_missing("tcx,bogus").unwrap_err();
    assert!(
        err.contains("bogus") && err.contains("ring_buffer"),
        "{err}"
    );
    assert_eq!(Probed::all_present().pretend_missing(""), Ok(vec![]));
}

#[test]
fn feature_names_are_unique_and_read_back() {
    for f in Feature::ALL {
        assert_eq!(Feature::from_name(f.name()), Some(f));
    }
    let mut names: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Feature::ALL.len());
}
