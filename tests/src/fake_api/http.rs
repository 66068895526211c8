//! HTTP/1.1 as the API server speaks it to a client: requests on a
//! connection one after another (keep-alive) until the client closes it or a
//! watch takes it over; the path is parsed the way the API server lays it
//! out, then served from the store.

use std::{collections::BTreeMap, sync::Arc};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

use super::{
    Cluster, Kind, Request, Shared, admission,
    auth::UserInfo,
    paging::Page,
    rbac::{self, Attributes},
    selector::Selector,
    status::ApiError,
    store::{Change, Deleted},
};

/// `/api/v1/...` or `/apis/GROUP/VERSION/...`, then
/// `[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]]`.
struct Target {
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    query: BTreeMap<String, String>,
}

fn parse_target(target: &str) -> Option<Target> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, "v1", rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        rest => (None, rest),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
        _ => return None,
    };
    Some(Target {
        kind: Kind::from_path(group, resource)?,
        namespace,
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
        query,
    })
}

/// Serves the requests of a connection, one after another, until the
/// client closes it, asks to (`Connection: close`), or a watch ends it.
/// Keep-alive matters for what the benchmarks measure: a new connection per
/// request would make the fake, not the client, the cost of every write.
pub async fn serve(mut stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let mut pending = Vec::with_capacity(16 * 1024);
    while let Some((head, body)) = read_request(&mut stream, &mut pending).await? {
        let close = header(&head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let served = serve_one(&mut stream, &mut pending, &shared, &head, body, close).await?;
        if served == After::Close {
            break;
        }
    }
    stream.shutdown().await
}

/// Reads a request: its head, and its body as JSON (null when empty).
/// `None` when the client closed the connection. Bytes past the request
/// stay in `pending` for the next one.
async fn read_request(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
) -> std::io::Result<Option<(String, Value)>> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 || pending.len() > 1 << 20 {
            return Ok(None);
        }
        pending.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).into_owned();
    let content_length: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while pending.len() < head_end + content_length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        pending.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&pending[head_end..head_end + content_length])
        .unwrap_or(Value::Null);
    pending.drain(..head_end + content_length);
    Ok(Some((head, body)))
}

/// Whether a connection can carry another request after one was served.
#[derive(Debug, PartialEq, Eq)]
enum After {
    Next,
    Close,
}

/// Serves one request (a watch until it ends); nothing when the API is
/// cut or the client gave up during a stall, and then the connection is
/// closed. The request is recorded as it arrives, and noted once handled.
async fn serve_one(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    shared: &Arc<Shared>,
    head: &str,
    body: Value,
    close: bool,
) -> std::io::Result<After> {
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("GET").to_owned();
    let target = words.next().unwrap_or("/").to_owned();
    if shared.store().cut {
        return Ok(After::Close); // drop the connection: the API is unreachable
    }
    let user = user_of(head);
    let parsed = parse_target(&target).map(|target| {
        let watch = target
            .query
            .get("watch")
            .is_some_and(|v| v == "true" || v == "1");
        let verb = verb(&method, &target, watch);
        let id = record(shared, &user, verb, &target);
        shared.trigger_stall(&user, target.kind, verb);
        (target, watch, verb, id)
    });
    let id = parsed.as_ref().map(|(.., id)| *id);
    if shared.stalls(&user)
        && let Some(gone) = wait_watching(stream, pending, shared.unstalled(&user)).await
    {
        if let Some(id) = id {
            shared.note(id, |r| r.given_up = Some(gone));
        }
        return Ok(After::Close); // given up on: never handled
    }
    if shared.store().cut {
        return Ok(After::Close);
    }
    let gate = match gate(shared, &user, parsed.as_ref().map(|(t, _, v, _)| (t, *v))) {
        Ok(gate) => gate,
        Err(e) => {
            if let Some(id) = id {
                shared.note(id, |r| {
                    r.handled = Some(std::time::Instant::now());
                    r.code = Some(e.code);
                });
            }
            return respond(stream, e.code, &e.status().to_string(), close).await;
        }
    };
    let Some((target, watch, verb, id)) = parsed else {
        let error = ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({target})"),
        };
        return respond(stream, error.code, &error.status().to_string(), close).await;
    };
    if watch {
        shared.note(id, |r| {
            r.handled = Some(std::time::Instant::now());
            r.code = Some(200);
        });
        watch_stream(stream, shared, &target, &user).await?;
        return Ok(After::Close);
    }
    let delay = shared.store().delays.get(&(target.kind, verb)).copied();
    if let Some(delay) = delay {
        // Received: carried out after the delay even if the client gives up
        // meanwhile.
        let until = tokio::time::Instant::now() + delay;
        let gone = wait_watching(stream, pending, tokio::time::sleep_until(until)).await;
        if let Some(gone) = gone {
            shared.note(id, |r| r.given_up = Some(gone));
            tokio::time::sleep_until(until).await;
        }
    }
    let injected = shared.store().injected_failure(target.kind, verb);
    shared.note(id, |r| r.handled = Some(std::time::Instant::now()));
    let handled =
        injected.and_then(|()| handle(shared, &method, head, &target, body, gate.as_ref()));
    let (code, answer) = match handled {
        Ok((code, text)) => (code, text),
        Err(e) => (e.code, e.status().to_string()),
    };
    shared.note(id, |r| r.code = Some(code));
    respond(stream, code, &answer, close).await
}

/// Waits for `until` while watching the connection; returns when the client
/// closed it, if it did (then at once). Bytes the client sends meanwhile
/// are kept in `pending` for the next request.
async fn wait_watching(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    until: impl Future<Output = ()>,
) -> Option<std::time::Instant> {
    tokio::pin!(until);
    let mut chunk = [0u8; 4096];
    loop {
        tokio::select! {
            () = &mut until => return None,
            read = stream.read(&mut chunk) => match read {
                Ok(0) | Err(_) => return Some(std::time::Instant::now()),
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            },
        }
    }
}

/// The request's label selector; one the API server would refuse is a 400.
fn selector_of(target: &Target) -> Result<Selector, ApiError> {
    let text = target.query.get("labelSelector").map_or("", String::as_str);
    Selector::parse(text).map_err(|e| ApiError {
        code: 400,
        reason: "BadRequest",
        message: e.0,
    })
}

/// The RBAC verb of a request.
fn verb(method: &str, target: &Target, watch: bool) -> &'static str {
    match (method, target.name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        _ => "unknown",
    }
}

/// The value of header `name` in `head`.
fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// The bearer token in `head`: who sent the request ("" for nobody).
fn user_of(head: &str) -> String {
    header(head, "authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_owned()
}

/// Records a request as it arrives; returns its index in the record.
fn record(shared: &Shared, user: &str, verb: &'static str, target: &Target) -> usize {
    let mut resource = target.kind.resource().to_owned();
    if let Some(sub) = &target.subresource {
        resource = format!("{resource}/{sub}");
    }
    let username = shared
        .auth()
        .tokens
        .authenticate(user)
        .map(|u| u.username.clone())
        .unwrap_or_default();
    let mut requests = shared.requests.lock().unwrap_or_else(|p| p.into_inner());
    requests.push(Request {
        user: user.to_owned(),
        username,
        verb,
        group: target.kind.group().to_owned(),
        resource,
        selector: target
            .query
            .get("labelSelector")
            .cloned()
            .unwrap_or_default(),
        at: std::time::Instant::now(),
        handled: None,
        given_up: None,
        code: None,
    });
    requests.len() - 1
}

/// Who a request is from and what the cluster enforces, while the server
/// enforces ([`super::FakeApi::enforce`]): the token authenticated (401
/// `Unauthorized` for one the server did not issue, as the API server
/// answers any request it cannot authenticate), then RBAC (403). `None`
/// while the server does not enforce.
fn gate(
    shared: &Shared,
    token: &str,
    request: Option<(&Target, &'static str)>,
) -> Result<Option<(UserInfo, Arc<Cluster>)>, ApiError> {
    let auth = shared.auth();
    let Some(cluster) = auth.cluster.clone() else {
        return Ok(None);
    };
    let Some(user) = auth.tokens.authenticate(token).cloned() else {
        return Err(ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
        });
    };
    drop(auth);
    if let Some((target, verb)) = request {
        let attrs = attributes(target, verb);
        if !cluster.rbac.allows(&user, &attrs) {
            return Err(rbac::forbidden(&user, &attrs));
        }
    }
    Ok(Some((user, cluster)))
}

/// A request as RBAC sees it (a create names nothing: its name is in the
/// body, which authorization does not read).
fn attributes(target: &Target, verb: &str) -> Attributes {
    Attributes {
        verb: verb.to_owned(),
        group: target.kind.group().to_owned(),
        resource: target.kind.resource().to_owned(),
        subresource: target.subresource.clone().unwrap_or_default(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: if verb == "create" {
            String::new()
        } else {
            target.name.clone().unwrap_or_default()
        },
    }
}

/// Validating admission of a write to `target` by `gate`'s user; the
/// operation follows from what the store passes (no old object: CREATE,
/// no new one: DELETE). `name` is the request's (for a create, the body's
/// `metadata.name`, empty with generateName).
fn admit<'a>(
    gate: Option<&'a (UserInfo, Arc<Cluster>)>,
    target: &'a Target,
    name: String,
) -> impl FnMut(Option<&Value>, Option<&Value>) -> Result<(), ApiError> + 'a {
    move |old, new| {
        let Some((user, cluster)) = gate else {
            return Ok(());
        };
        let operation = match (old, new) {
            (None, _) => "CREATE",
            (Some(_), Some(_)) => "UPDATE",
            (Some(_), None) => "DELETE",
        };
        let request = admission::Target {
            group: target.kind.group(),
            resource: target.kind.resource(),
            subresource: target.subresource.as_deref().unwrap_or(""),
            operation,
            namespace: target.namespace.as_deref().unwrap_or(""),
            name: &name,
            object: new,
            old,
        };
        cluster.policies.admit(&request, user)
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError {
        code: 500,
        reason: "InternalError",
        message: format!("cannot write the answer: {e}"),
    }
}

/// The only patch type the fake implements; the API server also takes
/// JSON patch, strategic merge patch (built-in kinds) and apply patch.
const MERGE_PATCH: &str = "application/merge-patch+json";

/// A PATCH's type, from its Content-Type without parameters; one the fake
/// does not implement is refused as the API server refuses an unknown one.
fn patch_type(head: &str) -> Result<(), ApiError> {
    let content_type = header(head, "content-type").unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case(MERGE_PATCH) {
        return Ok(());
    }
    Err(ApiError {
        code: 415,
        reason: "UnsupportedMediaType",
        message: format!(
            "the body of the request was in an unknown format - accepted media types include: {MERGE_PATCH} (the fake API implements merge patch only; teach tests/src/fake_api another type before relying on it)"
        ),
    })
}

/// As the API server checks a write's body against its path: a namespace
/// in the object must be the path's; none means the path's. Cluster-scoped
/// objects (no namespace in the path) have none.
fn namespace_of_path(body: &mut Value, namespace: &str) -> Result<(), ApiError> {
    if namespace.is_empty() {
        if let Some(meta) = body["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        return Ok(());
    }
    match body["metadata"]["namespace"].as_str() {
        None | Some("") => {
            body["metadata"]["namespace"] = json!(namespace);
            Ok(())
        }
        Some(theirs) if theirs == namespace => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
    }
}

/// Serves a request other than a watch: the status code and the JSON
/// answer.
fn handle(
    shared: &Arc<Shared>,
    method: &str,
    head: &str,
    target: &Target,
    mut body: Value,
    gate: Option<&(UserInfo, Arc<Cluster>)>,
) -> Result<(u16, String), ApiError> {
    let kind = target.kind;
    let name = match (method, &target.name) {
        (_, Some(name)) => name.clone(),
        _ => body["metadata"]["name"].as_str().unwrap_or("").to_owned(),
    };
    let mut admit = admit(gate, target, name);
    let ns = target.namespace.clone().unwrap_or_default();
    let key = target.name.as_ref().map(|n| format!("{ns}/{n}"));
    let status_only = target.subresource.as_deref() == Some("status");
    if let Some(sub) = target.subresource.as_deref()
        && !(status_only && kind.has_status())
    {
        return Err(ApiError {
            code: 404,
            reason: "NotFound",
            message: format!(
                "the server could not find the requested resource ({}/{sub})",
                kind.resource()
            ),
        });
    }
    // Not emulated: a dry run would be stored here. Refused, so that a
    // client starting to send one is noticed rather than misled.
    if target.query.contains_key("dryRun") {
        return Err(ApiError {
            code: 400,
            reason: "BadRequest",
            message: "the fake API does not emulate dryRun; teach it (tests/src/fake_api) before relying on it".into(),
        });
    }
    let mut store = shared.store();
    let (code, object, changes): (u16, Arc<Value>, Vec<Change>) = match (method, key) {
        ("GET", None) => {
            let selector = selector_of(target)?;
            let page = Page::of(&target.query, store.rv())?;
            let (items, next) =
                store.list_page(kind, target.namespace.as_deref(), &selector, &page);
            let mut metadata = json!({"resourceVersion": page.rv.to_string()});
            if let Some(last) = next {
                metadata["continue"] = json!(page.token_after(&last));
            }
            // Written from the stored objects, without copying them.
            let mut text = format!(
                "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{metadata},\"items\":[",
                json!(kind.api_version()),
                json!(kind.list_kind()),
            )
            .into_bytes();
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    text.push(b',');
                }
                serde_json::to_writer(&mut text, item).map_err(internal)?;
            }
            text.extend_from_slice(b"]}");
            return Ok((200, String::from_utf8(text).map_err(internal)?));
        }
        ("GET", Some(key)) => {
            let object = store.get(kind, &key).cloned().ok_or_else(|| ApiError {
                code: 404,
                reason: "NotFound",
                message: format!("{} \"{}\" not found", kind.resource(), key),
            })?;
            return Ok((200, object.to_string()));
        }
        ("POST", None) => {
            namespace_of_path(&mut body, &ns)?;
            let (object, changes) = store.create_admitted(kind, body, &mut admit)?;
            (201, object, changes)
        }
        ("PUT", Some(key)) => {
            namespace_of_path(&mut body, &ns)?;
            let (object, changes) =
                store.replace_admitted(kind, &key, body, status_only, &mut admit)?;
            (200, object, changes)
        }
        ("PATCH", Some(key)) => {
            patch_type(head)?;
            let (object, changes) =
                store.merge_patch_admitted(kind, &key, &body, status_only, &mut admit)?;
            (200, object, changes)
        }
        ("DELETE", Some(key)) => {
            let query_grace = match target.query.get("gracePeriodSeconds") {
                Some(v) => Some(v.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds: {v:?}"))
                })?),
                None => None,
            };
            let (object, changes, deleted) =
                store.delete_admitted(kind, &key, &body, query_grace, &mut admit)?;
            if let Deleted::Terminating { uid, grace } = deleted {
                shared.finish_later(kind, key, uid, grace);
            }
            (200, object, changes)
        }
        _ => {
            return Err(ApiError {
                code: 405,
                reason: "MethodNotAllowed",
                message: format!("{method} is not supported here"),
            });
        }
    };
    shared.publish(&store, changes);
    drop(store);
    Ok((code, object.to_string()))
}

async fn respond(
    stream: &mut TcpStream,
    code: u16,
    body: &str,
    close: bool,
) -> std::io::Result<After> {
    let connection = if close { "close" } else { "keep-alive" };
    let response = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n{body}",
        if code < 300 { "OK" } else { "Error" },
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await?;
    Ok(if close { After::Close } else { After::Next })
}

/// Where a watch starts: with `resourceVersion` unset or "0", the current
/// state as ADDED events, then what follows ("Get State and Start at Most
/// Recent" / "Start at Any"); with a version, every change after it.
fn watch_start(
    shared: &Shared,
    target: &Target,
    selector: &Selector,
) -> Result<(Vec<Change>, u64), ApiError> {
    let store = shared.store();
    let rv = target
        .query
        .get("resourceVersion")
        .map_or("", String::as_str);
    if matches!(rv, "" | "0") {
        let now = store.rv();
        let state = store
            .list(target.kind, target.namespace.as_deref(), selector)
            .into_iter()
            .map(|object| Change {
                rv: now,
                kind: target.kind,
                old: None,
                new: Some(Arc::new(object)),
            })
            .collect();
        return Ok((state, now));
    }
    let from: u64 = rv.parse().map_err(|_| ApiError {
        code: 400,
        reason: "BadRequest",
        message: format!("invalid resource version: {rv:?}"),
    })?;
    let backlog = store.log.iter().filter(|c| c.rv > from).cloned().collect();
    Ok((backlog, from))
}

/// A watch: where it starts ([`watch_start`]), then live changes, as
/// ADDED/MODIFIED/DELETED of the objects the selector matches.
async fn watch_stream(
    stream: &mut TcpStream,
    shared: &Shared,
    target: &Target,
    user: &str,
) -> std::io::Result<()> {
    let selector = match selector_of(target) {
        Ok(selector) => selector,
        Err(e) => {
            return respond(stream, e.code, &e.status().to_string(), true)
                .await
                .map(drop);
        }
    };
    // Subscribed before the start is read, so nothing falls in between.
    let mut rx = shared.changes.subscribe();
    let (backlog, mut sent) = match watch_start(shared, target, &selector) {
        Ok(start) => start,
        Err(e) => {
            return respond(stream, e.code, &e.status().to_string(), true)
                .await
                .map(drop);
        }
    };
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").await?;
    for change in backlog {
        send(stream, target, &selector, &change).await?;
        sent = sent.max(change.rv);
    }
    while let Ok(change) = rx.recv().await {
        let Some(change) = change else {
            return Ok(()); // cut
        };
        shared.unstalled(user).await;
        if change.rv > sent {
            send(stream, target, &selector, &change).await?;
            sent = change.rv;
        }
    }
    Ok(())
}

/// The event `change` is for this watch, as the API server's watch cache
/// makes it: an object that stops matching the selector is DELETED with
/// its previous content at the change's resourceVersion.
fn event_for(target: &Target, selector: &Selector, change: &Change) -> Option<String> {
    if change.kind != target.kind {
        return None;
    }
    let visible = |o: &Option<Arc<Value>>| {
        o.as_ref().is_some_and(|o| {
            selector.matches(o)
                && target
                    .namespace
                    .as_ref()
                    .is_none_or(|ns| o["metadata"]["namespace"] == ns.as_str())
        })
    };
    let (old, new) = (visible(&change.old), visible(&change.new));
    // Written straight out: wrapping the object in a new JSON value would
    // copy it for every watch.
    let event = |kind: &str, object: &Value| format!(r#"{{"type":"{kind}","object":{object}}}"#);
    match (&change.old, &change.new) {
        (_, Some(object)) if new => Some(event(if old { "MODIFIED" } else { "ADDED" }, object)),
        (Some(previous), _) if old => {
            let mut previous = Value::clone(previous);
            previous["metadata"]["resourceVersion"] = json!(change.rv.to_string());
            Some(event("DELETED", &previous))
        }
        _ => None,
    }
}

async fn send(
    stream: &mut TcpStream,
    target: &Target,
    selector: &Selector,
    change: &Change,
) -> std::io::Result<()> {
    let Some(mut line) = event_for(target, selector, change) else {
        return Ok(());
    };
    line.push('\n');
    stream
        .write_all(format!("{:x}\r\n{line}\r\n", line.len()).as_bytes())
        .await?;
    stream.flush().await
}
