//! The fake API over HTTP, checked against the API server's documented
//! behaviour for what the clients rely on: paged lists, watches from a
//! resourceVersion or from the current state, and selectors.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::{FakeApi, IpFamily, Kind};

fn service(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "jobs", "labels": labels}})
}

fn connect(api: &FakeApi, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(api.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    stream
}

/// One request: the status code and the JSON body.
fn get(api: &FakeApi, path: &str) -> (u16, Value) {
    let mut stream = connect(api, path);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let code = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    (code, serde_json::from_str(body).unwrap())
}

/// The first `n` events of a watch (each is one JSON line in a chunk).
fn events(api: &FakeApi, path: &str, n: usize, while_open: impl FnOnce()) -> Vec<Value> {
    let mut stream = connect(api, path);
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let mut while_open = Some(while_open);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lines: Vec<Value> = (text.lines())
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        match stream.read(&mut buf) {
            Ok(0) => return lines,
            Ok(read) => text.push_str(std::str::from_utf8(&buf[..read]).unwrap()),
            // Quiet: the watch has sent what it had; now make changes.
            Err(_) => {
                if let Some(act) = while_open.take() {
                    act();
                }
            }
        }
    }
}

fn names(items: &Value) -> Vec<&str> {
    (items.as_array().unwrap().iter())
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_paged_list_reports_the_first_pages_version_and_ends_without_a_token() {
    let api = FakeApi::start_on_loopback().unwrap();
    for name in ["a", "b", "c", "d", "e"] {
        api.apply(Kind::Service, service(name, json!({"app": "x"})));
    }
    api.apply(Kind::Service, service("bb", json!({"app": "other"})));
    let (code, first) = get(&api, "/api/v1/services?labelSelector=app%3Dx&limit=2");
    assert_eq!(code, 200);
    assert_eq!(names(&first["items"]), ["a", "b"]);
    let rv = first["metadata"]["resourceVersion"].clone();
    api.apply(Kind::Service, service("f", json!({"app": "x"})));
    let mut seen = names(&first["items"]).join(",");
    let mut token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    loop {
        let path = format!("/api/v1/services?labelSelector=app%3Dx&limit=2&continue={token}");
        let (code, page) = get(&api, &path);
        assert_eq!(code, 200);
        assert_eq!(page["metadata"]["resourceVersion"], rv);
        seen = format!("{seen},{}", names(&page["items"]).join(","));
        match page["metadata"]["continue"].as_str() {
            Some(next) => token = next.to_owned(),
            None => break,
        }
    }
    // Full pages of matching objects: the selector is applied before the
    // limit, as the API server fills a page.
    assert_eq!(seen, "a,b,c,d,e,f");
    let refused = format!("/api/v1/services?limit=2&continue={token}&resourceVersion=3");
    assert_eq!(get(&api, &refused).0, 400);
}

#[test]
fn an_invalid_selector_is_a_400_for_lists_and_watches() {
    let api = FakeApi::start_on_loopback().unwrap();
    let (code, status) = get(&api, "/api/v1/services?labelSelector=a%20in%20b");
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    let (code, _) = get(&api, "/api/v1/services?watch=true&labelSelector=%21");
    assert_eq!(code, 400);
}

#[test]
fn a_watch_from_a_version_replays_what_changed_after_it() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.apply(Kind::Service, service("a", json!({"app": "x"})));
    let (_, list) = get(&api, "/api/v1/services");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    api.apply(Kind::Service, service("b", json!({"app": "x"})));
    api.delete(Kind::Service, "jobs", "a");
    let got = events(
        &api,
        &format!("/api/v1/services?watch=true&resourceVersion={rv}"),
        2,
        || {},
    );
    let kinds: Vec<(&str, &str)> = (got.iter())
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, [("ADDED", "b"), ("DELETED", "a")]);
}

#[test]
fn a_watch_without_a_version_starts_from_the_current_state() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.apply(Kind::Service, service("gone", json!({"app": "x"})));
    api.delete(Kind::Service, "jobs", "gone");
    api.apply(Kind::Service, service("kept", json!({"app": "x"})));
    api.apply(
        Kind::Service,
        service("kept", json!({"app": "x", "v": "2"})),
    );
    for rv in ["", "&resourceVersion=0"] {
        let got = events(&api, &format!("/api/v1/services?watch=true{rv}"), 2, || {});
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["type"], "ADDED");
        assert_eq!(got[0]["object"]["metadata"]["labels"]["v"], "2");
    }
}

#[test]
fn an_object_that_stops_matching_is_deleted_with_its_previous_content_at_the_new_version() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.apply(Kind::Service, service("a", json!({"app": "x"})));
    let (_, list) = get(&api, "/api/v1/services");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/v1/services?watch=true&labelSelector=app%3Dx&resourceVersion={rv}");
    let got = events(&api, &path, 2, || {
        api.apply(Kind::Service, service("a", json!({"app": "y"})));
        api.apply(Kind::Service, service("a", json!({"app": "x"})));
    });
    let now = api.get(Kind::Service, "jobs", "a").unwrap();
    let relabelled: u64 = now["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["type"], "DELETED");
    assert_eq!(got[0]["object"]["metadata"]["labels"]["app"], "x");
    assert_eq!(
        got[0]["object"]["metadata"]["resourceVersion"],
        (relabelled - 1).to_string()
    );
    assert_eq!(got[1]["type"], "ADDED");
    assert_eq!(
        got[1]["object"]["metadata"]["resourceVersion"],
        relabelled.to_string()
    );
}

/// A watch skips a change older than one it has sent (the API server
/// never sends them out of order), so writers must publish in the order
/// they wrote.
#[test]
fn changes_are_published_in_resource_version_order_under_concurrent_writes() {
    let api = FakeApi::start_on_loopback().unwrap();
    let mut rx = api.shared.changes.subscribe();
    std::thread::scope(|scope| {
        for writer in 0..4 {
            let api = &api;
            scope.spawn(move || {
                for i in 0..2_000 {
                    api.apply(
                        Kind::Pod,
                        json!({"metadata": {"name": format!("p-{writer}-{i}"), "namespace": "jobs"}}),
                    );
                }
            });
        }
    });
    let mut last = 0;
    while let Ok(Some(change)) = rx.try_recv() {
        assert!(change.rv > last, "rv {} published after {last}", change.rv);
        last = change.rv;
    }
    assert_eq!(last, api.shared.store().rv());
}

/// Sends a request as `user` (its bearer token) and leaves the answer
/// unread.
fn send_as(api: &FakeApi, user: &str, method: &str, path: &str, body: &Value) -> TcpStream {
    let mut stream = TcpStream::connect(api.addr()).unwrap();
    let body = body.to_string();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: fake\r\nAuthorization: Bearer {user}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream
}

/// The status code of the answer on `stream`, if one comes within `wait`.
fn answer_within(stream: &mut TcpStream, wait: Duration) -> Option<u16> {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// A stall of one client holds only its requests, each recorded when it
/// arrives; one it gives up meanwhile is never carried out, one it waits
/// for is carried out once the stall ends.
#[test]
fn a_stalled_clients_requests_are_recorded_on_arrival_and_dropped_once_given_up() {
    let api = FakeApi::start_on_loopback().unwrap();
    let path = "/api/v1/namespaces/jobs/services";
    api.stall_user_at("a", Kind::Service, "create");
    let mut first = send_as(&api, "a", "POST", path, &service("first", json!({})));
    assert_eq!(answer_within(&mut first, Duration::from_millis(300)), None);
    // Another client is served meanwhile.
    let mut other = send_as(&api, "b", "POST", path, &service("other", json!({})));
    assert_eq!(answer_within(&mut other, Duration::from_secs(5)), Some(201));
    drop(first); // a gives up
    let mut second = send_as(&api, "a", "POST", path, &service("second", json!({})));
    assert_eq!(answer_within(&mut second, Duration::from_millis(300)), None);
    std::thread::sleep(Duration::from_millis(100));
    api.resume();
    assert_eq!(
        answer_within(&mut second, Duration::from_secs(5)),
        Some(201)
    );
    assert!(api.get(Kind::Service, "jobs", "first").is_none());
    assert!(api.get(Kind::Service, "jobs", "second").is_some());
    let requests = api.requests();
    let [first, other, second] = requests.as_slice() else {
        panic!("{requests:?}")
    };
    assert_eq!([&*first.user, &*other.user, &*second.user], ["a", "b", "a"]);
    // Recorded on arrival, before the other client's request.
    assert!(first.at < other.at && other.at < second.at, "{requests:?}");
    assert_eq!(first.handled, None, "given up: never carried out");
    let gave_up = first.given_up.expect("noticed that a gave up");
    assert!(gave_up > other.handled.unwrap(), "{requests:?}");
    let handled = second.handled.expect("carried out after the stall");
    assert!(
        handled >= second.at + Duration::from_millis(400),
        "{requests:?}"
    );
    assert_eq!(second.given_up, None);
}

/// A delayed request was received: the API server carries it out after
/// the delay even when its client gave up meanwhile.
#[test]
fn a_delayed_request_is_carried_out_after_its_delay_even_once_given_up() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.delay(Kind::Service, "create", Duration::from_millis(500));
    let path = "/api/v1/namespaces/jobs/services";
    drop(send_as(
        &api,
        "a",
        "POST",
        path,
        &service("late", json!({})),
    ));
    std::thread::sleep(Duration::from_millis(200));
    assert!(api.get(Kind::Service, "jobs", "late").is_none());
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.get(Kind::Service, "jobs", "late").is_none() {
        assert!(Instant::now() < deadline, "never carried out");
        std::thread::sleep(Duration::from_millis(20));
    }
    let requests = api.requests();
    let [late] = requests.as_slice() else {
        panic!("{requests:?}")
    };
    let (given_up, handled) = (late.given_up.unwrap(), late.handled.unwrap());
    assert!(given_up < late.at + Duration::from_millis(400), "{late:?}");
    assert!(handled >= late.at + Duration::from_millis(500), "{late:?}");
}

#[test]
fn a_services_ip_families_are_defaulted_and_choose_its_slices() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.dual_stack(IpFamily::Ipv6);
    let pod = json!({"metadata": {"name": "p", "namespace": "jobs", "labels": {"app": "a"}},
                     "spec": {"containers": [{"name": "c", "image": "i"}]},
                     "status": {"podIP": "fd00::5", "podIPs": [{"ip": "fd00::5"}, {"ip": "10.244.1.5"}],
                                "conditions": [{"type": "Ready", "status": "True"}]}});
    api.create(Kind::Pod, pod).unwrap();
    let selecting = |name: &str, families: Option<Value>| {
        let mut s = json!({"metadata": {"name": name, "namespace": "jobs"},
                           "spec": {"selector": {"app": "a"}, "ports": [{"port": 22}]}});
        if let Some(f) = families {
            s["spec"]["ipFamilies"] = f;
        }
        api.create(Kind::Service, s).unwrap()
    };
    let defaulted = selecting("defaulted", None);
    assert_eq!(defaulted["spec"]["ipFamilies"], json!(["IPv6"]));
    assert_eq!(defaulted["spec"]["ipFamilyPolicy"], "SingleStack");
    selecting("v4", Some(json!(["IPv4"])));
    let slices: Vec<(String, String, Value)> = api
        .list(Kind::EndpointSlice)
        .iter()
        .map(|s| {
            (
                s["metadata"]["labels"]["kubernetes.io/service-name"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                s["addressType"].as_str().unwrap().to_owned(),
                s["endpoints"][0]["addresses"].clone(),
            )
        })
        .collect();
    assert_eq!(
        slices,
        [
            ("defaulted".into(), "IPv6".into(), json!(["fd00::5"])),
            ("v4".into(), "IPv4".into(), json!(["10.244.1.5"])),
        ]
    );
}

#[test]
fn a_dual_stack_service_gets_a_slice_of_each_family_and_takes_an_ipv6_load_balancer_ip() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.dual_stack(IpFamily::Ipv4);
    let pod = json!({"metadata": {"name": "p", "namespace": "jobs", "labels": {"app": "a"}},
                     "spec": {"containers": [{"name": "c", "image": "i"}]},
                     "status": {"podIP": "10.244.1.5", "podIPs": [{"ip": "10.244.1.5"}, {"ip": "fd00::5"}],
                                "conditions": [{"type": "Ready", "status": "True"}]}});
    api.create(Kind::Pod, pod).unwrap();
    let created = api
        .create(
            Kind::Service,
            json!({"metadata": {"name": "dual", "namespace": "jobs"},
                   "spec": {"selector": {"app": "a"}, "ports": [{"port": 22}],
                            "ipFamilyPolicy": "RequireDualStack", "type": "LoadBalancer"}}),
        )
        .unwrap();
    assert_eq!(created["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    let mut slices: Vec<(String, Value)> = api
        .list(Kind::EndpointSlice)
        .iter()
        .map(|s| {
            let family = s["addressType"].as_str().unwrap().to_owned();
            (family, s["endpoints"][0]["addresses"].clone())
        })
        .collect();
    slices.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        slices,
        [
            ("IPv4".into(), json!(["10.244.1.5"])),
            ("IPv6".into(), json!(["fd00::5"]))
        ]
    );
    let ingress = json!([{"ip": "fd00:198::10"}, {"ip": "198.18.0.10"}]);
    api.patch_status(
        Kind::Service,
        "jobs",
        "dual",
        &json!({"status": {"loadBalancer": {"ingress": ingress}}}),
    );
    let read = api.get(Kind::Service, "jobs", "dual").unwrap();
    assert_eq!(read["status"]["loadBalancer"]["ingress"], ingress);
    assert_eq!(read["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
}

mod write;
