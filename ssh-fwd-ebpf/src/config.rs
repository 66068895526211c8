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
