//! The agent's check of `--port-range` against the node (docs/agent.md,
//! "Port range and the node's services"): a range over a port a socket of
//! the node's network namespace listens on is refused, naming the port,
//! its process and the fix, unless `--allow-port-overlap`.

use std::{net::TcpListener, time::Duration};

use ssh_fwd_tests::{NetNs, agent, privilege};

const EXTERNAL_IP: &str = "198.18.0.10";

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_port_range_over_a_port_the_node_listens_on_is_refused_naming_it() {
    privilege::require();
    let node = NetNs::new("node").unwrap();
    let (up, ready) = std::sync::mpsc::channel();
    let (done, stop) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let node = &node;
        s.spawn(move || {
            node.enter_on_this_thread().unwrap();
            let _listener = TcpListener::bind(("0.0.0.0", 20005)).unwrap();
            up.send(()).unwrap();
            let _ = stop.recv_timeout(Duration::from_secs(30));
        });
        ready.recv_timeout(Duration::from_secs(5)).unwrap();
        let run = |extra: &[&str]| {
            let out = node
                .command("timeout")
                .arg("10")
                .arg(agent::binary().unwrap())
                .args([
                    "agent",
                    "--external-iface",
                    "lo",
                    "--kubernetes",
                    "--kubeconfig",
                    "/nonexistent/kubeconfig",
                    "--ssh-ip",
                    EXTERNAL_IP,
                    "--port-range",
                    "20000-20010",
                ])
                .args(extra)
                .output()
                .unwrap();
            assert!(!out.status.success());
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let refused = run(&[]);
        assert!(refused.contains("20005 (0.0.0.0 by "), "{refused}");
        assert!(refused.contains("--allow-port-overlap"), "{refused}");
        assert!(refused.contains("20000-27999"), "the fix: {refused}");
        let allowed = run(&["--allow-port-overlap"]);
        assert!(
            allowed.contains("going on as --allow-port-overlap says")
                && allowed.contains("kubeconfig"),
            "allowed, it goes on to Kubernetes: {allowed}"
        );
        done.send(()).unwrap();
    });
}
