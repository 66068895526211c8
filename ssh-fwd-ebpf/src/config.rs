//! Settings the agent fixes when it loads the programs
//! (`EbpfLoader::set_global`): constants to the verifier, so a setting that
//! is off costs nothing at run time.

/// `--cross-node plain`: the network between nodes does not pass IPv4
/// options, so translated SYNs leave without their frontend, and a reply
/// from a backend without tracked state gets the backend's primary frontend.
#[unsafe(no_mangle)]
static CROSS_NODE_PLAIN: u8 = 0;

#[inline(always)]
pub fn cross_node_plain() -> bool {
    // SAFETY: a plain read of a static; volatile so that the compiler does
    // not fold the default in before the loader sets it.
    unsafe { core::ptr::read_volatile(&CROSS_NODE_PLAIN) != 0 }
}

/// `--redirect off`: no program sends a translated packet on itself; every
/// one goes through the kernel's forwarding path and its netfilter hooks.
#[unsafe(no_mangle)]
static NO_REDIRECT: u8 = 0;

#[inline(always)]
pub fn no_redirect() -> bool {
    // SAFETY: as for `cross_node_plain`.
    unsafe { core::ptr::read_volatile(&NO_REDIRECT) != 0 }
}

/// `--deny-action reset`: a segment the allowlist denies is answered with a
/// TCP RST (`crate::reset`) instead of dropped in silence.
#[unsafe(no_mangle)]
static DENY_RESET: u8 = 0;

#[inline(always)]
pub fn deny_reset() -> bool {
    // SAFETY: as for `cross_node_plain`.
    unsafe { core::ptr::read_volatile(&DENY_RESET) != 0 }
}

/// `--conn-confirm-timeout`, in nanoseconds: how long a claim waits for
/// the server's confirmation.
#[unsafe(no_mangle)]
static CONFIRM_TIMEOUT_NS: u64 = ssh_fwd_common::conntrack::CONFIRM_TIMEOUT_NS;

#[inline(always)]
pub fn confirm_timeout_ns() -> u64 {
    // SAFETY: as for `cross_node_plain`.
    unsafe { core::ptr::read_volatile(&CONFIRM_TIMEOUT_NS) }
}

/// `--conns-per-source`: the connections one client address may hold (0:
/// no limit).
#[unsafe(no_mangle)]
static CONNS_PER_SOURCE: u32 = ssh_fwd_common::maps::CONNS_PER_SOURCE;

#[inline(always)]
pub fn conns_per_source() -> u32 {
    // SAFETY: as for `cross_node_plain`.
    unsafe { core::ptr::read_volatile(&CONNS_PER_SOURCE) }
}

/// `--conn-log`: 0 off, 1 accepted connections, 2 everything (refused
/// SYNs too, and closed connections with their traffic).
#[unsafe(no_mangle)]
static CONN_LOG: u8 = 1;

/// Whether accepted connections go to the log.
#[inline(always)]
pub fn log_accepted() -> bool {
    // SAFETY: as for `cross_node_plain`.
    unsafe { core::ptr::read_volatile(&CONN_LOG) >= 1 }
}

/// Whether refused SYNs and closed connections go to the log, and each
/// connection's traffic is counted for it.
#[inline(always)]
pub fn log_all() -> bool {
    // SAFETY: as for `cross_node_plain`.
    unsafe { core::ptr::read_volatile(&CONN_LOG) >= 2 }
}

/// `--conn-log-rate`: the records of refused SYNs each CPU writes a
/// second at most.
#[unsafe(no_mangle)]
static REFUSED_RECORDS: u32 = 100;

#[inline(always)]
pub fn refused_records() -> u64 {
    // SAFETY: as for `cross_node_plain`.
    u64::from(unsafe { core::ptr::read_volatile(&REFUSED_RECORDS) })
}

/// The cluster's key (`--cross-node-key`), if the agent set one.
#[inline(always)]
pub fn cross_node_key() -> Option<[u64; 2]> {
    crate::maps::CROSS_NODE_KEY
        .get(0)
        .copied()
        .filter(|key| *key != [0, 0])
}
