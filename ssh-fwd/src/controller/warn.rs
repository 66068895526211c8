//! Why a pod cannot be served, as the Warning event it gets: the reason is
//! what `kubectl get events` filters on, the note names the cause and the
//! fix. Each is sent once per pod and problem, and again only after the pod
//! was served in between.

use super::{pod::PodMeta, service::InvalidTargetPort, webhook::keys::INSTALL_CONTAINER};
use crate::vocabulary::{
    self, ENDPOINT, action,
    reason::{self, SSH_READY},
};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// Every port of the range on the SSH IP is taken.
    NoFreePort,
    /// The target-port annotation is one the API server would refuse.
    InvalidTargetPort { value: String },
    /// A Service not made by ssh-fwd has the name this pod's would get.
    NameTaken { service: String },
    /// The pod gets its port only after it was created, so its containers
    /// lack the endpoint variable (or name `told`, a port it lost);
    /// `admission` says why.
    EnvMissing {
        variable: String,
        told: Option<u16>,
        admission: Admission,
    },
}

/// What the webhook did with a pod created without its port, as the pod's
/// annotations show it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Admission {
    /// It answered without a port, and wrote why ([`vocabulary::ADMISSION`]);
    /// it added the keys all the same.
    WithoutPort { why: String },
    /// It answered with a port (the pod carries its reservation token),
    /// which the pod lost since.
    WithPort,
    /// Nothing of ours on the pod: the webhook was not called or did not
    /// answer. `keys`: the Secret the pod names for its keys, which are then
    /// missing too.
    Unseen { keys: Option<String> },
}

impl Admission {
    pub fn of(pod: &PodMeta) -> Self {
        let annotation = |key: &str| pod.annotation(key).map(str::to_owned);
        if let Some(why) = annotation(vocabulary::ADMISSION) {
            return Self::WithoutPort { why };
        }
        if annotation(vocabulary::RESERVATION).is_some() {
            return Self::WithPort;
        }
        Self::Unseen {
            keys: annotation(vocabulary::KEYS_SECRET),
        }
    }
}

/// The longest note events.k8s.io/v1 takes, in bytes (the API server
/// refuses a longer one with 422).
pub const NOTE_LIMIT: usize = 1024;

/// The most of a user's text (a pod annotation) a note quotes.
const QUOTED_CHARS: usize = 200;

/// `note` cut to [`NOTE_LIMIT`] bytes on a character boundary, marked
/// where it was cut.
pub fn bounded(mut note: String) -> String {
    const CUT: &str = " [...]";
    if note.len() <= NOTE_LIMIT {
        return note;
    }
    let mut end = NOTE_LIMIT - CUT.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push_str(CUT);
    note
}

/// A user's text as a note shows it: escaped as a Rust string literal
/// (quotes, control characters), without the surrounding quotes, and at
/// most [`QUOTED_CHARS`] characters of it.
fn escaped(text: &str) -> String {
    let mut shown: String = text.chars().take(QUOTED_CHARS).collect();
    if shown.len() < text.len() {
        shown.push_str("...");
    }
    let literal = format!("{shown:?}");
    literal[1..literal.len() - 1].to_owned()
}

/// What a note needs beyond the problem.
pub struct Scope<'a> {
    pub ssh_ip: std::net::IpAddr,
    pub range: &'a std::ops::RangeInclusive<u16>,
    pub namespace: &'a str,
}

impl Problem {
    /// The event's `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::NoFreePort => reason::NO_FREE_PORT,
            Problem::InvalidTargetPort { .. } => reason::INVALID_TARGET_PORT,
            Problem::NameTaken { .. } => reason::SERVICE_NAME_TAKEN,
            Problem::EnvMissing { .. } => reason::SSH_ENV_MISSING,
        }
    }

    /// The event's `action`.
    pub fn action(&self) -> &'static str {
        match self {
            Problem::NoFreePort => action::ALLOCATE,
            Problem::InvalidTargetPort { .. } | Problem::NameTaken { .. } => action::CREATE_SERVICE,
            Problem::EnvMissing { .. } => action::ALLOCATE,
        }
    }

    /// The event's note: the cause and the fix, the user's text in it
    /// quoted, within [`NOTE_LIMIT`].
    pub fn note(&self, scope: &Scope<'_>) -> String {
        bounded(self.full_note(scope))
    }

    fn full_note(&self, scope: &Scope<'_>) -> String {
        match self {
            Problem::NoFreePort => format!(
                "No free SSH port: all of {}-{} on {} are taken. The pod gets one as soon as another SSH job ends; an operator can widen --port-range (and the agents' --port-range).",
                scope.range.start(),
                scope.range.end(),
                scope.ssh_ip
            ),
            Problem::InvalidTargetPort { value } => {
                format!("No SSH Service: {}.", InvalidTargetPort(escaped(value)))
            }
            Problem::NameTaken { service } => format!(
                "No SSH Service: Service {}/{service} exists and was not made by ssh-fwd, so this pod cannot get its own. Rename or delete that Service, and the pod gets a port.",
                scope.namespace
            ),
            Problem::EnvMissing {
                variable,
                told: None,
                admission,
            } => {
                let why = match admission {
                    Admission::WithoutPort { why } => format!(
                        "the ssh-fwd admission webhook admitted it without a port: \"{}\".",
                        escaped(why)
                    ),
                    Admission::WithPort => {
                        "its port reservation from admission is gone (deleted by hand?).".to_owned()
                    }
                    Admission::Unseen { keys } => {
                        let mut why = "the ssh-fwd admission webhook was not called or did not answer (with failurePolicy Ignore the API server creates the pod anyway: is a controller replica serving the webhook, and do its objectSelector and namespaceSelector let this pod through?).".to_owned();
                        if let Some(secret) = keys {
                            let secret = escaped(secret);
                            why.push_str(&format!(" Its SSH keys (Secret {secret}) are not installed either: the webhook adds the init container {INSTALL_CONTAINER} that installs them."));
                        }
                        why
                    }
                };
                format!(
                    "This pod was created without {variable}: {why} Its port is assigned now and shown in the annotation {ENDPOINT} and the {SSH_READY} event; recreate the pod to have {variable} set."
                )
            }
            Problem::EnvMissing {
                variable,
                told: Some(port),
                ..
            } => format!(
                "{variable} in this pod names port {port}, but another Service holds that port now, so the pod gets another one, shown in the annotation {ENDPOINT} and the {SSH_READY} event; {variable} is out of date: recreate the pod to have it right."
            ),
        }
    }
}

/// The note of a pod whose port `port` was taken from a quarantine that
/// gave way: the previous job on it ended at `since`, it is `now`.
pub fn quarantine_cut(
    port: u16,
    since: k8s_openapi::jiff::Timestamp,
    now: k8s_openapi::jiff::Timestamp,
    scope: &Scope<'_>,
) -> String {
    let ago = now.duration_since(since).unsigned_abs();
    let ago = humantime::format_duration(std::time::Duration::from_secs(ago.as_secs()));
    bounded(format!(
        "The quarantine of port {port} gave way: this pod got it {ago} after the job that held it ended, within --port-reuse-after, because every other port of {}-{} on {} is taken. Clients that knew the previous job at {}:{port} may see its host key change. An operator can widen --port-range (and the agents' --port-range).",
        scope.range.start(),
        scope.range.end(),
        scope.ssh_ip,
        scope.ssh_ip,
    ))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::controller::pod::{PodView, PodWire};

    #[test]
    fn each_warning_names_its_cause_and_fix() {
        let range = 9000..=9001;
        let scope = Scope {
            ssh_ip: "198.18.0.10".parse().unwrap(),
            range: &range,
            namespace: "jobs",
        };
        let full = Problem::NoFreePort.note(&scope);
        assert!(full.contains("9000-9001 on 198.18.0.10") && full.contains("--port-range"));
        let bad = Problem::InvalidTargetPort {
            value: "99999".into(),
        };
        let note = bad.note(&scope);
        assert!(
            note.contains(&format!("{} is `99999`", vocabulary::TARGET_PORT)),
            "{note}"
        );
        assert!(note.contains("remove it for port 22"), "{note}");
        assert_eq!(bad.reason(), reason::INVALID_TARGET_PORT);
        let taken = Problem::NameTaken {
            service: "ssh-job".into(),
        };
        let note = taken.note(&scope);
        assert!(note.contains("Service jobs/ssh-job exists and was not made by ssh-fwd"));
        assert!(note.contains("Rename or delete that Service"), "{note}");
    }

    fn meta(annotations: &[(&str, &str)]) -> PodMeta {
        let annotations = (annotations.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let pod = PodWire {
            metadata: ObjectMeta {
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: None,
            status: None,
        };
        PodView::from(pod).metadata
    }

    #[test]
    fn a_pod_without_its_variable_is_told_what_the_webhook_did_with_it() {
        let range = 9000..=9001;
        let scope = Scope {
            ssh_ip: "198.18.0.10".parse().unwrap(),
            range: &range,
            namespace: "jobs",
        };
        let note = |pod: &PodMeta| {
            Problem::EnvMissing {
                variable: "UCLOUD_PUBLIC_SSH".into(),
                told: None,
                admission: Admission::of(pod),
            }
            .note(&scope)
        };
        let why = "no free SSH port at admission: all of 9000-9001 are taken";
        let answered = meta(&[
            (vocabulary::ADMISSION, why),
            (vocabulary::KEYS_SECRET, "alice-keys"),
        ]);
        let text = note(&answered);
        assert!(
            text.contains(&format!("without a port: \"{why}\".")),
            "{text}"
        );
        assert!(!text.contains("keys"), "the webhook added them: {text}");
        let unseen = meta(&[(vocabulary::KEYS_SECRET, "alice-keys")]);
        let text = note(&unseen);
        assert!(text.contains("was not called or did not answer"), "{text}");
        assert!(
            text.contains("(Secret alice-keys) are not installed either"),
            "{text}"
        );
        assert!(!note(&meta(&[])).contains("keys"));
        let lost = meta(&[(vocabulary::RESERVATION, "tok")]);
        assert_eq!(Admission::of(&lost), Admission::WithPort);
        assert!(note(&lost).contains("reservation from admission is gone"));
    }

    #[test]
    fn a_quarantine_cut_short_names_the_port_how_long_ago_and_the_fix() {
        let range = 9000..=9001;
        let scope = Scope {
            ssh_ip: "198.18.0.10".parse().unwrap(),
            range: &range,
            namespace: "jobs",
        };
        let since = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_125).unwrap();
        let note = quarantine_cut(9001, since, now, &scope);
        assert!(note.contains("quarantine of port 9001 gave way"), "{note}");
        assert!(note.contains("2m 5s after the job"), "{note}");
        assert!(note.contains("--port-reuse-after"), "{note}");
        assert!(note.contains("9000-9001 on 198.18.0.10"), "{note}");
        assert!(note.contains("widen --port-range"), "{note}");
    }

    #[test]
    fn a_note_is_cut_on_a_character_boundary_to_what_an_event_takes() {
        assert_eq!(bounded("short".into()), "short");
        for filler in ["x", "ü", "€", "😀"] {
            let long = filler.repeat(2000);
            let cut = bounded(long.clone());
            assert!(cut.len() <= NOTE_LIMIT, "{filler}: {} bytes", cut.len());
            assert!(cut.len() > NOTE_LIMIT - 10, "{filler}: {} bytes", cut.len());
            assert!(cut.ends_with(" [...]"));
            assert!(long.starts_with(cut.trim_end_matches(" [...]")));
        }
    }

    #[test]
    fn the_users_text_in_a_note_is_escaped_and_bounded() {
        let range = 9000..=9001;
        let scope = Scope {
            ssh_ip: "198.18.0.10".parse().unwrap(),
            range: &range,
            namespace: "jobs",
        };
        let bad = Problem::InvalidTargetPort {
            value: "ssh\n\u{1b}[31m\"".into(),
        };
        let note = bad.note(&scope);
        assert!(
            note.contains(r#"target-port is `ssh\n\u{1b}[31m\"`"#),
            "{note}"
        );
        let secret = "k".repeat(5000);
        let unseen = Problem::EnvMissing {
            variable: "V".into(),
            told: None,
            admission: Admission::Unseen { keys: Some(secret) },
        };
        let note = unseen.note(&scope);
        assert!(
            note.contains(&format!("(Secret {}...)", "k".repeat(200))),
            "{note}"
        );
        assert!(note.contains("recreate the pod"), "{note}");
    }
}
