//! The cluster's key that seals the frontend option (`--cross-node-key`,
//! `ssh_fwd_common::ipopt`): read from a file, or in Kubernetes mode kept
//! in a Secret of the agent's namespace that the first agent creates. Every
//! agent of a cluster must hold the same key; a node that cannot check a
//! sealed option ignores it (counted as `frontend_option_forged`).

use std::{path::Path, time::Duration};

use anyhow::Context as _;
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use ssh_fwd_common::siphash::Key;

use crate::datapath::key::KeyMap;

/// The Secret's data key that holds the key, as 32 hex digits.
const DATA_KEY: &str = "key";

/// Where the agent takes the key from.
pub enum KeySource {
    /// No key: `--cross-node plain`, or no `--cross-node-key` outside
    /// Kubernetes mode. Options are plain.
    None,
    /// `--cross-node-key`, read at start-up.
    File(Key),
    /// The Secret of the agent's namespace, kept by [`keep`].
    Secret { client: kube::Client, name: String },
}

/// The source the agent's flags name. A key file is read now: a bad one is
/// an error before anything touches the kernel.
pub fn source(
    args: &super::args::AgentArgs,
    client: Option<kube::Client>,
) -> anyhow::Result<KeySource> {
    if args.cross_node == super::args::CrossNode::Plain {
        if args.cross_node_key.is_some() {
            tracing::warn!(
                "--cross-node-key is unused under --cross-node plain: no node sends an option"
            );
        }
        return Ok(KeySource::None);
    }
    if let Some(path) = &args.cross_node_key {
        return Ok(KeySource::File(read_file(path)?));
    }
    match (&args.cross_node_key_secret, client) {
        (Some(name), Some(client)) => Ok(KeySource::Secret {
            client,
            name: name.clone(),
        }),
        _ => Ok(KeySource::None),
    }
}

/// Puts the source's key in force in `map`: at once for a file or none;
/// for a Secret in the background, with the key the previous agent left
/// in force until the Secret is read (an agent that restarts while the API
/// server is away keeps sealing), and read again every
/// [`SECRET_REFRESH`] so a new key takes effect without a restart.
pub fn apply(source: KeySource, mut map: KeyMap) -> anyhow::Result<()> {
    match source {
        KeySource::None => {
            map.write(None)?;
            tracing::info!(
                "no cross-node key: a translated SYN carries a plain frontend option, which the \
                 pod's node believes only on an interface nothing but other nodes reach (a \
                 --cluster-iface that is not external)"
            );
        }
        KeySource::File(key) => {
            map.write(Some(key))?;
            tracing::info!("translated SYNs carry a frontend option sealed with --cross-node-key");
        }
        KeySource::Secret { client, name } => {
            tokio::spawn(keep(client, name, map));
        }
    }
    Ok(())
}

/// How often the Secret is read again once known.
pub const SECRET_REFRESH: Duration = Duration::from_secs(60);
/// The longest wait between two failed reads of the Secret.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Keeps the Secret's key in force, for ever.
async fn keep(client: kube::Client, name: String, mut map: KeyMap) {
    let mut in_force = map.read().ok().flatten();
    let mut retry = Duration::from_secs(1);
    let mut told_failure = false;
    loop {
        match ensure_secret(client.clone(), &name).await {
            Ok(key) => {
                retry = Duration::from_secs(1);
                told_failure = false;
                if in_force != Some(key) {
                    match map.write(Some(key)) {
                        Ok(()) => {
                            tracing::info!(
                                secret = name,
                                changed = in_force.is_some(),
                                "translated SYNs carry a frontend option sealed with the \
                                 cluster's key"
                            );
                            in_force = Some(key);
                        }
                        Err(e) => tracing::warn!(
                            error = format!("{e:#}"),
                            "cannot put the cross-node key in force"
                        ),
                    }
                }
                tokio::time::sleep(SECRET_REFRESH).await;
            }
            Err(e) => {
                if !told_failure {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        in_force = in_force.is_some(),
                        "cannot read the cross-node key yet; retrying (the key in force, if any, \
                         stays)"
                    );
                    told_failure = true;
                }
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

/// What is wrong with a key's text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("a key is 32 hex digits (128 bits); this has {0} characters")]
    Length(usize),
    #[error("a key is 32 hex digits; `{0}` is not one")]
    NotHex(char),
    #[error("an all-zero key means no key")]
    Zero,
}

/// The key in `text`: 32 hex digits, surrounding whitespace ignored.
pub fn parse(text: &str) -> Result<Key, KeyError> {
    let text = text.trim();
    if text.len() != 32 {
        return Err(KeyError::Length(text.chars().count()));
    }
    if let Some(c) = text.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(KeyError::NotHex(c));
    }
    // 32 hex digits: the two halves always parse.
    let half = |s: &str| u64::from_str_radix(s, 16).unwrap_or_default();
    let key = [half(&text[..16]), half(&text[16..])];
    if key == [0, 0] {
        return Err(KeyError::Zero);
    }
    Ok(key)
}

/// The key as 32 hex digits.
pub fn format(key: &Key) -> String {
    format!("{:016x}{:016x}", key[0], key[1])
}

/// A new random key.
pub fn generate() -> Key {
    loop {
        let key: Key = [rand::random(), rand::random()];
        if key != [0, 0] {
            return key;
        }
    }
}

/// The key in the file at `path`.
pub fn read_file(path: &Path) -> anyhow::Result<Key> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --cross-node-key {}", path.display()))?;
    parse(&text).with_context(|| {
        format!(
            "--cross-node-key {}: make one with `openssl rand -hex 16 > {}` and give every \
             agent of the cluster the same file",
            path.display(),
            path.display()
        )
    })
}

/// The key in the Secret `name` of the client's namespace, made first (a
/// random key) if there is none. Two agents that start together both try
/// to create it: the loser reads the winner's.
pub async fn ensure_secret(client: kube::Client, name: &str) -> anyhow::Result<Key> {
    let namespace = client.default_namespace().to_owned();
    let secrets: Api<Secret> = Api::default_namespaced(client);
    let what = format!("the cross-node key Secret {namespace}/{name}");
    for _ in 0..3 {
        let found = secrets
            .get_opt(name)
            .await
            .with_context(|| format!("reading {what}"))?;
        if let Some(secret) = found {
            return key_of(&secret).with_context(|| {
                format!(
                    "{what}: delete it and restart every agent (the first makes a new key), or \
                     write 32 hex digits (`openssl rand -hex 16`) into its `{DATA_KEY}` field"
                )
            });
        }
        let key = generate();
        match secrets
            .create(&PostParams::default(), &secret_of(name, &key))
            .await
        {
            Ok(_) => {
                tracing::info!(secret = %format!("{namespace}/{name}"), "created the cross-node key");
                return Ok(key);
            }
            // Another agent made it first: read that one.
            Err(kube::Error::Api(s)) if s.is_already_exists() => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {what}")),
        }
    }
    anyhow::bail!("{what} was created and deleted again while this agent read it; start again")
}

fn secret_of(name: &str, key: &Key) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                [(
                    "app.kubernetes.io/name".to_owned(),
                    "ssh-fwd-agent".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        data: Some([(DATA_KEY.to_owned(), ByteString(format(key).into_bytes()))].into()),
        ..Secret::default()
    }
}

fn key_of(secret: &Secret) -> anyhow::Result<Key> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .with_context(|| format!("it has no `{DATA_KEY}` field"))?;
    let text = std::str::from_utf8(&bytes.0).context("its key is not text")?;
    Ok(parse(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_32_hex_digits_and_round_trips() {
        let key = parse(" 0123456789abcdefFEDCBA9876543210\n").unwrap();
        assert_eq!(key, [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        assert_eq!(format(&key), "0123456789abcdeffedcba9876543210");
        let made = generate();
        assert_eq!(parse(&format(&made)), Ok(made));
        assert_eq!(key_of(&secret_of("k", &made)).unwrap(), made);
    }

    #[test]
    fn a_bad_key_is_refused_with_what_is_wrong() {
        assert_eq!(parse("abc"), Err(KeyError::Length(3)));
        assert_eq!(
            parse("0123456789abcdef0123456789abcdeg"),
            Err(KeyError::NotHex('g'))
        );
        assert_eq!(parse(&"0".repeat(32)), Err(KeyError::Zero));
        assert_eq!(
            parse("ééééééééééééééééé").unwrap_err(),
            KeyError::Length(17)
        );
    }
}
