//! Pods that cannot be served get a Warning naming why, and the others are
//! served as usual.

use super::*;
use crate::vocabulary;

fn warned(actions: &[Action]) -> Vec<(&str, &Problem)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Warn { pod, problem } => Some((pod.name.as_str(), problem)),
            _ => None,
        })
        .collect()
}

#[test]
fn when_the_range_is_full_one_pod_is_told_and_the_others_are_served() {
    let pods = [pod("a", json!({})), pod("b", json!({}))];
    let actions = run(
        &pods,
        &[foreign("legacy", 9000, "2026-10-01T00:00:00Z")],
        9000..=9001,
    );
    assert_eq!(created_ports(&actions), [9001]);
    let told = warned(&actions);
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].1, &Problem::NoFreePort);
}

#[test]
fn a_pod_with_an_invalid_target_port_is_warned_and_gets_no_service() {
    let bad = pod(
        "bad",
        json!({"metadata": {"annotations": {vocabulary::TARGET_PORT: "99999"}}}),
    );
    let good = pod("good", json!({}));
    let actions = run(&[bad, good], &[], 9000..=9100);
    assert_eq!(created_ports(&actions).len(), 1, "the other pod is served");
    assert_eq!(
        warned(&actions),
        [(
            "bad",
            &Problem::InvalidTargetPort {
                value: "99999".into()
            }
        )]
    );
}

#[test]
fn a_service_name_held_by_someone_elses_service_warns_the_pod() {
    let p = pod("job", json!({}));
    let mut squatter =
        serde_json::to_value(foreign("ssh-job", 7000, "2026-10-01T00:00:00Z").as_ref()).unwrap();
    squatter["metadata"]["namespace"] = json!("jobs");
    let squatter: Arc<Service> = Arc::new(serde_json::from_value(squatter).unwrap());
    let actions = run(&[p], &[squatter], 9000..=9100);
    assert_eq!(
        warned(&actions),
        [(
            "job",
            &Problem::NameTaken {
                service: "ssh-job".into()
            }
        )]
    );
    assert!(created_ports(&actions).is_empty());
}

#[test]
fn our_service_left_by_an_earlier_pod_of_the_same_name_is_replaced_without_a_warning() {
    let earlier = pod("job", json!({}));
    let left = ours(&earlier, 9000, "2026-11-01T00:00:00Z", true);
    let now = pod("job", json!({"metadata": {"uid": "uid-job-2"}}));
    let actions = run(&[now], &[left], 9000..=9100);
    let [
        Action::Delete {
            name,
            unpublish: Some(gone),
            ..
        },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    assert_eq!((name.as_str(), gone.uid.as_str()), ("ssh-job", "uid-job"));
}
