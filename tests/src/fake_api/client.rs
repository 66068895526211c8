//! A client of the fake API server for the tests themselves: one request
//! with a party's token, answered as the server answers any client, so a
//! test can act as a tenant, an agent or the controller and see what the
//! server allows.

use std::{
    io::{Read as _, Write as _},
    os::fd::AsRawFd as _,
};

use anyhow::Context as _;
use serde_json::Value;

use super::FakeApi;

impl FakeApi {
    /// Sends one HTTP/1.1 request with `token` (a merge patch for PATCH),
    /// from the network namespace the server listens in; the status code
    /// and the JSON answer (`null` when it is not JSON).
    ///
    /// # Panics
    ///
    /// If the server cannot be reached or answers no HTTP.
    pub fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let request = request(token, method, path, body);
        let (addr, netns) = (self.addr, self.netns.clone());
        let answer = std::thread::spawn(move || -> anyhow::Result<String> {
            if let Some(path) = netns {
                let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
                // SAFETY: setns on this thread only, with a valid namespace fd.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(std::io::Error::last_os_error()).context("setns");
                }
            }
            let mut tcp = std::net::TcpStream::connect(addr)?;
            tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
            tcp.write_all(request.as_bytes())?;
            let mut answer = String::new();
            tcp.read_to_string(&mut answer)?;
            Ok(answer)
        })
        .join();
        let answer = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => panic!("{method} {path} to the fake API server: {e:#}"),
            Err(_) => panic!("{method} {path}: the client thread panicked"),
        };
        let code = (answer.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("{method} {path}: no HTTP status in {answer:?}"));
        let json = (answer.split_once("\r\n\r\n"))
            .and_then(|(_, b)| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null);
        (code, json)
    }
}

fn request(token: &str, method: &str, path: &str, body: Option<&Value>) -> String {
    let body = body.map(Value::to_string).unwrap_or_default();
    let content_type = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    format!(
        "{method} {path} HTTP/1.1\r\nHost: fake\r\nAuthorization: Bearer {token}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
