//! Checks that turn the kernel's bare EPERM/EINVAL into a message saying what
//! to fix, before anything is changed.

use anyhow::bail;

const CAP_SYS_ADMIN: u32 = 21;

/// A capability the agent may need, and what for.
struct Needed {
    bit: u32,
    name: &'static str,
    why: &'static str,
}

/// Needed always; CAP_SYS_ADMIN stands in for all of them on every kernel.
const BPF_CAPS: [Needed; 3] = [
    Needed {
        bit: 39,
        name: "CAP_BPF",
        why: "load programs and create maps",
    },
    Needed {
        bit: 12,
        name: "CAP_NET_ADMIN",
        why: "attach XDP and tc programs",
    },
    Needed {
        bit: 38,
        name: "CAP_PERFMON",
        why: "let programs read packet memory with pointer arithmetic",
    },
];

/// Not needed to forward: without it the agent works on, later to notice
/// a change, and says so at start.
const EVENT_CAPS: [Needed; 1] = [Needed {
    bit: 11,
    name: "CAP_NET_BROADCAST",
    why: "listen to the address events of every network namespace, pods' included; without \
          it addresses are read again at each resync only",
}];

/// Needed with `--announce l2` (the gratuitous ARPs, the probes and the
/// answers to them go through packet and raw sockets); checked when the
/// socket is opened.
const PACKET_CAP: Needed = Needed {
    bit: 13,
    name: "CAP_NET_RAW",
    why: "send and hear ARP and neighbour discovery for --announce l2",
};

/// Needed only when the agent has to mount bpffs itself.
const MOUNT_CAP: Needed = Needed {
    bit: CAP_SYS_ADMIN,
    name: "CAP_SYS_ADMIN",
    why: "mount bpffs when --bpffs is not on one",
};

/// Fails with the names of the missing capabilities.
pub fn check_capabilities(need_mount: bool) -> anyhow::Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(effective) = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    else {
        return Ok(()); // cannot tell; the kernel will say EPERM if needed
    };
    let lacks = |c: &Needed| effective & (1u64 << c.bit) == 0;
    let mut missing: Vec<&Needed> = Vec::new();
    if lacks(&MOUNT_CAP) {
        missing.extend(BPF_CAPS.iter().filter(|c| lacks(c)));
        if need_mount {
            missing.push(&MOUNT_CAP);
        }
    }
    let missing: Vec<String> = missing
        .iter()
        .map(|c| format!("{} (to {})", c.name, c.why))
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing capabilities: {}; run as root, or grant them (in Kubernetes: \
             securityContext.capabilities.add)",
            missing.join(", ")
        );
    }
    for c in EVENT_CAPS.iter().filter(|c| lacks(c)) {
        tracing::warn!(
            "no {} (to {}): grant it (in Kubernetes: securityContext.capabilities.add: [{}])",
            c.name,
            c.why,
            short(c.name)
        );
    }
    Ok(())
}

/// A capability as `securityContext.capabilities.add` spells it.
fn short(name: &'static str) -> &'static str {
    name.trim_start_matches("CAP_")
}

/// The kernel's release, as `uname -r` prints it: what the log lines of
/// missing features name (the features themselves are probed, not read
/// from it: see [`super::features`]).
pub fn kernel_release() -> Option<String> {
    // SAFETY: a plain C struct of byte arrays; all-zero is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct we own.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    Some(
        u.release
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8 as char)
            .collect(),
    )
}

/// `e` with what to do about it on top, when its cause is a failure of the
/// BPF syscall [`explain_bpf_error`] knows.
pub fn with_hint(e: anyhow::Error) -> anyhow::Error {
    match explain_bpf_error(e.root_cause()) {
        Some(hint) => e.context(hint),
        None => e,
    }
}

/// Explains a failure of the BPF syscall in terms of what to do.
pub fn explain_bpf_error(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                    Some(refused_hint(&status).into())
                }
                Some(libc::ENOSYS) => {
                    Some("this kernel has no BPF syscall (CONFIG_BPF_SYSCALL is off)".into())
                }
                _ => None,
            };
        }
        source = e.source();
    }
    None
}

/// What to do about an EPERM from bpf(2), given /proc/self/status. The
/// capabilities were checked before anything was loaded, so under a seccomp
/// filter the filter is the likelier cause: the default profiles of several
/// container runtimes (podman's and CRI-O's among them) allow bpf(2) only
/// with CAP_SYS_ADMIN, not with CAP_BPF.
fn refused_hint(status: &str) -> &'static str {
    let filtered = status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .is_some_and(|mode| mode.trim() == "2");
    if filtered {
        "the kernel refused a BPF operation, and this process runs under a seccomp filter \
         (Seccomp: 2 in /proc/self/status), which may allow bpf(2) only with CAP_SYS_ADMIN, as \
         the default profiles of podman and CRI-O do: run the agent without one \
         (securityContext.seccompProfile.type: Unconfined, as deploy/base/agent-daemonset.yaml \
         does; podman or docker: --security-opt seccomp=unconfined) or with a profile that \
         allows bpf"
    } else {
        "the kernel refused a BPF operation: run as root or with CAP_BPF, CAP_NET_ADMIN and \
         CAP_PERFMON"
    }
}

/// Every capability the agent asks for when bpffs is already mounted, as
/// `securityContext.capabilities.add` spells them (`BPF`, `NET_ADMIN`,
/// ...): those it needs, those it warns at start without, and with
/// `packet_sockets` (`--announce l2`) `NET_RAW`.
pub fn capability_names(packet_sockets: bool) -> Vec<&'static str> {
    let packet = packet_sockets.then_some(&PACKET_CAP);
    (BPF_CAPS.iter().chain(&EVENT_CAPS).chain(packet))
        .map(|c| short(c.name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_bpf_call_under_a_seccomp_filter_names_the_filter_and_the_fix() {
        let filtered = refused_hint("Name:\tssh-fwd\nNoNewPrivs:\t1\nSeccomp:\t2\n");
        assert!(filtered.contains("seccomp filter"), "{filtered}");
        assert!(
            filtered.contains("seccompProfile.type: Unconfined"),
            "{filtered}"
        );
        let unfiltered = refused_hint("Name:\tssh-fwd\nSeccomp:\t0\n");
        assert!(!unfiltered.contains("seccomp"), "{unfiltered}");
        assert!(unfiltered.contains("CAP_BPF"), "{unfiltered}");
        assert_eq!(refused_hint(""), unfiltered);
    }

    #[test]
    fn the_kernel_release_reads_as_uname_prints_it() {
        let release = kernel_release().unwrap();
        assert!(
            release.starts_with(|c: char| c.is_ascii_digit()),
            "{release}"
        );
    }
}
