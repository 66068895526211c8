//! A real Prometheus (Debian's binary) in one of the test's namespaces, on
//! loopback, with its storage in a temporary directory: started with a
//! configuration the test writes, asked over its HTTP API, and killed with
//! its process group when dropped, also when a test fails.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    os::unix::process::CommandExt as _,
    process::{Child, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::{NetNs, cmd, ssh::kill_group};

/// Where Prometheus listens, inside its namespace.
pub const ADDR: &str = "127.0.0.1:9090";

pub struct Prometheus<'a> {
    child: Child,
    ns: &'a NetNs,
    dir: tempfile::TempDir,
}

impl<'a> Prometheus<'a> {
    /// Starts Prometheus in `ns` with `config` (prometheus.yml's text) and
    /// the rule files `rules` (name, text), and waits until it is ready.
    pub fn start(ns: &'a NetNs, config: &str, rules: &[(&str, &str)]) -> anyhow::Result<Self> {
        let binary = crate::privilege::which("prometheus")
            .context("prometheus not installed (cargo xtask setup installs it)")?;
        let dir = tempfile::Builder::new()
            .prefix("ssh-fwd-prometheus")
            .tempdir()?;
        for (name, text) in rules {
            std::fs::write(dir.path().join(name), text)?;
        }
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let child = ns
            .command(binary.to_str().context("prometheus path is not UTF-8")?)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={ADDR}"))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("starting prometheus")?;
        let prometheus = Self { child, ns, dir };
        let ready = cmd::wait_until(Duration::from_secs(20), || {
            prometheus
                .get("/-/ready")
                .is_ok_and(|(status, _)| status == 200)
        });
        if !ready {
            bail!(
                "prometheus not ready within 20 s; its log:\n{}",
                prometheus.log()
            );
        }
        Ok(prometheus)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` on Prometheus: the status and the body.
    pub fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        get_in(self.ns, ADDR, path)
    }

    /// `GET /api/v1/...`: the `data` of a successful answer.
    pub fn api(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let (status, body) = self.get(&format!("/api/v1/{path_and_query}"))?;
        let answer: Value =
            serde_json::from_str(&body).with_context(|| format!("{status}: {body}"))?;
        if answer["status"] != "success" {
            bail!("/api/v1/{path_and_query}: {status} {body}");
        }
        Ok(answer["data"].clone())
    }

    /// An instant query of `promql`, now.
    pub fn query(&self, promql: &str) -> anyhow::Result<Value> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .finish();
        self.api(&format!("query?{query}"))
    }

    /// The alerts in the firing state, by name.
    pub fn firing(&self) -> anyhow::Result<Vec<Value>> {
        let data = self.api("alerts")?;
        Ok(data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["state"] == "firing")
            .cloned()
            .collect())
    }
}

impl Drop for Prometheus<'_> {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// `GET path` on `addr` from inside `ns` (HTTP/1.0, on a thread of its
/// own that enters the namespace): the status and the body.
pub fn get_in(ns: &NetNs, addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let addr: SocketAddr = addr.parse()?;
    std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<(u16, String)> {
            ns.enter_on_this_thread()?;
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            let (head, body) = answer
                .split_once("\r\n\r\n")
                .with_context(|| format!("no HTTP answer from {addr}: {answer:?}"))?;
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("no status in {head:?}"))?;
            Ok((status, body.to_owned()))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the HTTP thread panicked"))?
    })
}
