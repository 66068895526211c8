//! The eBPF object embedded in the binary: loading it (reusing the maps a
//! previous agent pinned), its programs by name, and verifying them.

use anyhow::{Context as _, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::MapInfo,
    programs::{ProgramError, SchedClassifier, Xdp},
};
use ssh_fwd_common::{
    conntrack::CONFIRM_TIMEOUT_NS,
    maps::{
        CONN_CAPACITY, CONNS, CONNS_PER_SOURCE, HALF_OPEN, HALF_OPEN_CAPACITY, LOADED_DENY_RESET,
        LOADED_NO_REDIRECT, LOADED_QUOTA_BY_KERNEL, LoadedSettings, MAPPING_NAMES, MAX_MAPPINGS,
        SYN_BUCKET_CAPACITY, SYN_BUCKETS,
    },
};

use super::{events::ConnLog, pins::PinLayout, preflight};

/// The eBPF object built by build.rs from `ssh-fwd-ebpf`.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ssh-fwd"));

/// DNAT on an external interface, native or generic XDP.
pub const PROG_INGRESS_XDP: &str = "ssh_fwd_ingress_xdp";
/// DNAT on an external interface, tc ingress.
pub const PROG_INGRESS_TC: &str = "ssh_fwd_ingress_tc";
/// Reverse NAT on an external interface, tc egress.
pub const PROG_EGRESS_TC: &str = "ssh_fwd_egress_tc";
/// Reverse NAT on the host end of a pod's interface, tc ingress.
pub const PROG_REPLY_TC: &str = "ssh_fwd_reply_tc";

/// What is fixed when the object is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// How many mappings the frontend, reverse, name and counter tables
    /// hold.
    pub max_mappings: u32,
    /// Capacity of the established-connections table.
    pub conn_table_size: u32,
    /// Capacity of the half-open table, and of the claims table.
    pub half_open_table_size: u32,
    /// Capacity of the per-source table of `--syn-rate`.
    pub syn_bucket_table_size: u32,
    /// How long a claim waits for its server's confirmation, in
    /// nanoseconds (`--conn-confirm-timeout`).
    pub confirm_timeout_ns: u64,
    /// The connections one client address may hold (0: no limit).
    pub conns_per_source: u32,
    /// The network between nodes drops IPv4 options (`--cross-node plain`).
    pub cross_node_plain: bool,
    /// Whether the tc programs send translated packets on themselves.
    pub redirect: RedirectMode,
    /// Which connections the programs write records of.
    pub conn_log: ConnLog,
    /// The records of refused SYNs each CPU writes a second at most
    /// (`--conn-log-rate`).
    pub refused_records: u32,
    /// What a segment the allowlist denies gets.
    pub deny_action: DenyAction,
    /// Whether this node serves IPv6: its tables are made at their full
    /// size only then (`super::capacity`).
    pub ipv6: bool,
}

impl Settings {
    /// What the flags say of the tables' sizes.
    pub fn sizes(&self) -> super::capacity::Sizes {
        super::capacity::Sizes {
            max_mappings: self.max_mappings,
            conn_table_size: self.conn_table_size,
            half_open_table_size: self.half_open_table_size,
            syn_bucket_table_size: self.syn_bucket_table_size,
            ipv6: self.ipv6,
        }
    }

    /// What the pinned `LOADED_SETTINGS` map records of these.
    pub fn recorded(&self) -> LoadedSettings {
        let redirect = match self.redirect {
            RedirectMode::Auto => 0,
            RedirectMode::Off => LOADED_NO_REDIRECT,
        };
        let deny = match self.deny_action {
            DenyAction::Drop => 0,
            DenyAction::Reset => LOADED_DENY_RESET,
        };
        LoadedSettings {
            flags: redirect | deny | LOADED_QUOTA_BY_KERNEL,
        }
    }
}

/// `--deny-action`: baked into the programs when they are loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DenyAction {
    /// Drop the segment: the client hears nothing, and its connect times
    /// out, as against a firewall that drops.
    #[default]
    Drop,
    /// Answer it with a TCP RST from the frontend: the client's connect
    /// fails at once with "connection refused".
    Reset,
}

impl DenyAction {
    /// The action recorded in `settings`.
    pub fn of(settings: LoadedSettings) -> Self {
        if settings.flags & LOADED_DENY_RESET != 0 {
            Self::Reset
        } else {
            Self::Drop
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Drop => "drop",
            Self::Reset => "reset",
        }
    }
}

/// `--redirect`: baked into the programs when they are loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RedirectMode {
    /// Route translated packets in the tc programs and send them straight
    /// out (skips the node's netfilter).
    #[default]
    Auto,
    /// Every translated packet takes the kernel's forwarding path and its
    /// netfilter hooks.
    Off,
}

impl RedirectMode {
    /// The mode recorded in `settings`.
    pub fn of(settings: LoadedSettings) -> Self {
        if settings.flags & LOADED_NO_REDIRECT != 0 {
            Self::Off
        } else {
            Self::Auto
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Off => "off",
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_mappings: MAX_MAPPINGS,
            conn_table_size: CONN_CAPACITY,
            half_open_table_size: HALF_OPEN_CAPACITY,
            syn_bucket_table_size: SYN_BUCKET_CAPACITY,
            confirm_timeout_ns: CONFIRM_TIMEOUT_NS,
            conns_per_source: CONNS_PER_SOURCE,
            cross_node_plain: false,
            redirect: RedirectMode::Auto,
            conn_log: ConnLog::Accepted,
            refused_records: 100,
            deny_action: DenyAction::Drop,
            ipv6: true,
        }
    }
}

/// Loads the object with its maps pinned in (or adopted from) the layout's
/// maps directory. The programs are not loaded yet: see [`load_programs`].
/// Adopted tables must have the capacities asked for: a map cannot be
/// resized in place, and a silent mismatch would leave the operator's
/// setting without effect.
pub fn load(layout: &PinLayout, settings: &Settings) -> anyhow::Result<Ebpf> {
    raise_memlock_limit();
    let carried = super::outdated::replace(layout)?;
    super::capacity::replace_ipv6(layout, settings.ipv6)?;
    let plain = u8::from(settings.cross_node_plain);
    let no_redirect = u8::from(settings.redirect == RedirectMode::Off);
    let conn_log = settings.conn_log.kernel_level();
    let deny_reset = u8::from(settings.deny_action == DenyAction::Reset);
    let mut loader = EbpfLoader::new();
    for (map, entries) in super::capacity::capacities(&settings.sizes()) {
        loader.map_max_entries(map, entries);
    }
    let mut ebpf = loader
        // The programs read only UAPI structures (packets, `__sk_buff`,
        // `bpf_sock_addr`) and have no CO-RE relocation, so the kernel's
        // BTF, which aya would otherwise parse whole at every start (about
        // 150 ms and 10 MiB), is not needed.
        .btf(None)
        .default_map_pin_directory(layout.maps_dir())
        .override_global("CROSS_NODE_PLAIN", &plain, true)
        .override_global("NO_REDIRECT", &no_redirect, true)
        .override_global("DENY_RESET", &deny_reset, true)
        .override_global("CONFIRM_TIMEOUT_NS", &settings.confirm_timeout_ns, true)
        .override_global("CONNS_PER_SOURCE", &settings.conns_per_source, true)
        .override_global("CONN_LOG", &conn_log, true)
        .override_global("REFUSED_RECORDS", &settings.refused_records, true)
        .load(OBJECT)
        .map_err(|e| {
            let hint = preflight::explain_bpf_error(&e);
            let e = anyhow::Error::new(e);
            match hint {
                Some(hint) => e.context(hint),
                None => e,
            }
        })
        .with_context(|| {
            format!(
                "loading the eBPF object with maps in {}",
                layout.maps_dir().display()
            )
        })?;
    for (map, flag, wanted) in [
        (MAPPING_NAMES, "--max-mappings", settings.max_mappings),
        (CONNS, "--conn-table-size", settings.conn_table_size),
        (
            HALF_OPEN,
            "--half-open-table-size",
            settings.half_open_table_size,
        ),
        (
            SYN_BUCKETS,
            "--syn-bucket-table-size",
            settings.syn_bucket_table_size,
        ),
    ] {
        let pin = layout.map(map);
        let info = MapInfo::from_pin(&pin).with_context(|| format!("reading {}", pin.display()))?;
        if info.max_entries() != wanted {
            bail!(
                "the pinned table {} holds {} entries, but {flag} asks for {wanted}; a pinned \
                 table cannot be resized while the programs forward through it: start the agent \
                 with {flag} {} to keep it and the open sessions, or stop the agent, run \
                 `ssh-fwd teardown --bpffs {}` (open sessions end) and start it with the new size",
                pin.display(),
                info.max_entries(),
                info.max_entries(),
                layout.root().display()
            );
        }
    }
    carried.write(&mut ebpf)?;
    Ok(ebpf)
}

/// Hands the tc programs to the verifier (once per agent); the XDP one
/// waits for an interface that needs it ([`loaded_xdp`]).
pub fn load_programs(ebpf: &mut Ebpf) -> anyhow::Result<()> {
    for name in [PROG_INGRESS_TC, PROG_EGRESS_TC, PROG_REPLY_TC] {
        let prog = classifier(ebpf, name)?;
        retrying(|| prog.load())
            .map_err(|e| verifier_to_debug(name, e))
            .with_context(|| format!("loading tc program {name}"))?;
    }
    Ok(())
}

/// A refused load as the user's error: the kernel's answer and where to
/// look, with the verifier's log (hundreds of lines) kept for the debug
/// log, where a developer reads it.
pub fn verifier_to_debug(name: &str, e: ProgramError) -> anyhow::Error {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            tracing::debug!(program = name, %verifier_log, "the verifier's log of a refused load");
            // The kernel's answer as text, not as the io::Error: the
            // verifier's EACCES is no missing permission, which
            // `preflight::with_hint` would take it for.
            anyhow::anyhow!("{io_error}").context(format!(
                "the kernel refused program {name} (its verifier's log is logged with \
                 --log debug); a kernel that lacks a feature the program needs refuses it \
                 so: see docs/kernels.md"
            ))
        }
        other => other.into(),
    }
}

/// How often a program load the kernel interrupted is tried again.
const LOAD_ATTEMPTS: usize = 5;

/// Runs a program load, again while the kernel answers EAGAIN: the
/// verifier gives up with it when the loading thread has a signal pending
/// (a busy process's child exiting), and the same load then succeeds, as
/// libbpf retries it.
pub fn retrying(mut load: impl FnMut() -> Result<(), ProgramError>) -> Result<(), ProgramError> {
    let mut attempt = 1;
    loop {
        match load() {
            Err(ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(libc::EAGAIN) && attempt < LOAD_ATTEMPTS =>
            {
                tracing::debug!(
                    attempt,
                    "the kernel interrupted a program load; trying again"
                );
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The XDP ingress program, handed to the verifier the first time an
/// interface takes it: on veths and in tc mode it never runs, and its
/// verification was a tenth of the agent's start (37 ms).
pub fn loaded_xdp(ebpf: &mut Ebpf) -> anyhow::Result<&mut Xdp> {
    let prog = xdp(ebpf)?;
    if prog.fd().is_err() {
        retrying(|| prog.load())
            .map_err(|e| verifier_to_debug(PROG_INGRESS_XDP, e))
            .map_err(preflight::with_hint)
            .context("loading the XDP program")?;
    }
    Ok(prog)
}

/// The XDP ingress program.
pub fn xdp(ebpf: &mut Ebpf) -> anyhow::Result<&mut Xdp> {
    ebpf.program_mut(PROG_INGRESS_XDP)
        .ok_or_else(|| anyhow!("eBPF object lacks {PROG_INGRESS_XDP}; rebuild ssh-fwd"))?
        .try_into()
        .context(PROG_INGRESS_XDP)
}

/// One of the tc programs.
pub fn classifier<'a>(ebpf: &'a mut Ebpf, name: &str) -> anyhow::Result<&'a mut SchedClassifier> {
    ebpf.program_mut(name)
        .ok_or_else(|| anyhow!("eBPF object lacks {name}; rebuild ssh-fwd"))?
        .try_into()
        .with_context(|| name.to_owned())
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } != 0 {
        tracing::debug!("could not raise RLIMIT_MEMLOCK; fine on Linux 5.11+");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_settings_read_back_and_the_defaults_record_only_the_quota_mark() {
        // The mark tells an older data path's tables apart, whatever the
        // settings (see `LOADED_QUOTA_BY_KERNEL`).
        assert_eq!(
            Settings::default().recorded(),
            LoadedSettings {
                flags: LOADED_QUOTA_BY_KERNEL
            }
        );
        for redirect in [RedirectMode::Auto, RedirectMode::Off] {
            for deny_action in [DenyAction::Drop, DenyAction::Reset] {
                let settings = Settings {
                    redirect,
                    deny_action,
                    ..Settings::default()
                };
                let recorded = settings.recorded();
                assert_eq!(RedirectMode::of(recorded), redirect);
                assert_eq!(DenyAction::of(recorded), deny_action);
            }
        }
    }
}
