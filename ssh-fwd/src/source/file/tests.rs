use super::*;

fn err(text: &str) -> String {
    parse(text, "m.yaml").unwrap_err().to_string()
}

#[test]
fn documented_example_parses() {
    let set = parse(
        "mappings:\n  - name: job-4711          # optional label\n    frontend: 198.18.0.10:8022\n    backend: 10.244.1.5:22\n  - frontend: 198.18.0.10:8023\n    backend: 10.244.1.6:22\n",
        "m.yaml",
    )
    .unwrap();
    let all: Vec<_> = set.iter().cloned().collect();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].name, "job-4711");
    assert_eq!(all[0].frontend, "198.18.0.10:8022".parse().unwrap());
    assert_eq!(all[0].backend, "10.244.1.5:22".parse().unwrap());
    assert_eq!(all[1].name, "");
}

#[test]
fn explicit_empty_list_is_an_empty_set_but_an_empty_file_is_rejected() {
    assert!(parse("mappings: []\n", "m.yaml").unwrap().is_empty());
    assert!(err("").contains("is empty; write `mappings: []`"));
    assert!(err("  \n").contains("is empty"));
}

#[test]
fn unknown_field_is_rejected_with_its_name() {
    let e = err("mappings:\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n    weight: 3\n");
    assert!(e.contains("unknown field `weight`"), "{e}");
    let e = err("mapings: []\n");
    assert!(e.contains("unknown field `mapings`"), "{e}");
}

#[test]
fn bad_address_names_the_entry_and_field() {
    let e = err(
        "mappings:\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n  - name: b\n    frontend: 1.2.3:80\n    backend: 10.0.0.1:22\n",
    );
    assert_eq!(
        e,
        "mappings file m.yaml, entry #2 (b): frontend `1.2.3:80` is not an IPv4 address with a port, like 198.18.0.10:8022"
    );
    let e = err("mappings:\n  - frontend: 1.2.3.4\n    backend: 10.0.0.1:22\n");
    assert!(
        e.contains("entry #1: frontend `1.2.3.4` is not an IPv4 address"),
        "{e}"
    );
    let e = err("mappings:\n  - frontend: '[::1]:80'\n    backend: 10.0.0.1:22\n");
    assert!(e.contains("is IPv6"), "{e}");
    let e = err("mappings:\n  - frontend: 0.0.0.0:80\n    backend: 10.0.0.1:22\n");
    assert!(e.contains("not a unicast address"), "{e}");
}

#[test]
fn port_zero_is_rejected_in_either_field() {
    let e = err("mappings:\n  - frontend: 1.2.3.4:0\n    backend: 10.0.0.1:22\n");
    assert!(
        e.contains("entry #1: frontend `1.2.3.4:0` has port 0"),
        "{e}"
    );
    let e = err("mappings:\n  - frontend: 1.2.3.4:1\n    backend: 10.0.0.1:0\n");
    assert!(e.contains("backend `10.0.0.1:0` has port 0"), "{e}");
}

#[test]
fn duplicate_frontend_names_both_entries() {
    let e = err(
        "mappings:\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n  - frontend: 1.2.3.4:81\n    backend: 10.0.0.1:22\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.2:22\n",
    );
    assert!(
        e.contains("entries #1 and #3 both use frontend 1.2.3.4:80"),
        "{e}"
    );
}

#[test]
fn overlong_name_is_rejected() {
    let text = format!(
        "mappings:\n  - name: {}\n    frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n",
        "x".repeat(200)
    );
    assert!(err(&text).contains("name is 200 bytes long; keep it at most 127"));
}
