//! A frame in which another MAC claims an SSH IP this node answers for
//! (an ARP request or reply from it, a neighbour advertisement for it),
//! the same for both families (`ssh_fwd_common::maps::on_claim` decides):
//! another agent's claim is recorded in `ARP_HEARD` or `NDP_HEARD`, and an
//! entry flagged to yield is removed; a claim from a MAC no agent
//! published is counted in `ARP_FOREIGN` or `NDP_FOREIGN` and changes
//! nothing else, so no host of the segment can silence the holder.

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_NOEXIST},
    helpers::bpf_ktime_get_ns,
    maps::HashMap,
};
use ssh_fwd_common::maps::{Announce, Foreign, Heard, MacKey, OnClaim, on_claim};

use crate::{atomic::add_u64, maps::AGENT_MACS};

/// One family's maps a claim touches.
pub struct Maps<'a, K: 'static, A: 'static> {
    pub announce: &'a HashMap<K, Announce>,
    pub heard: &'a HashMap<A, Heard>,
    pub foreign: &'a HashMap<A, Foreign>,
}

/// `sender` claims the address `addr`, which this node answers for on
/// the arrival interface (`key`, holding `ours`). `true`: another
/// machine's claim, noted; `false`: one of this node's own.
#[inline(always)]
pub fn claimed<K, A>(
    maps: &Maps<'_, K, A>,
    key: &K,
    ours: &Announce,
    addr: &A,
    sender: [u8; 6],
) -> bool {
    // SAFETY: copied out at once.
    let agent = unsafe { AGENT_MACS.get(MacKey::new(sender)) }.copied();
    match on_claim(ours, sender, agent) {
        OnClaim::Ours => false,
        OnClaim::Agent { give_way } => {
            let heard = Heard {
                mac: sender,
                _pad: [0; 2],
                at_ns: now(),
            };
            // A full map loses the news; the counter still has it.
            let _ = maps.heard.insert(addr, heard, u64::from(BPF_ANY));
            if give_way {
                // Another agent holds it now: stop at once, whether or not
                // this node's agent is alive to notice.
                let _ = maps.announce.remove(key);
            }
            true
        }
        OnClaim::Foreign => {
            foreign(maps.foreign, addr, sender);
            true
        }
    }
}

/// Counts a claim of `addr` by `sender`, a MAC no agent published, and
/// keeps it as the last one.
#[inline(always)]
fn foreign<A>(map: &HashMap<A, Foreign>, addr: &A, sender: [u8; 6]) {
    let at_ns = now();
    if let Some(entry) = map.get_ptr_mut(addr) {
        // SAFETY: a live value of this map for the rest of the run; the
        // count is added to atomically, the other fields are plain writes
        // (a racing CPU's are as good).
        unsafe {
            (*entry).mac = sender;
            (*entry).at_ns = at_ns;
            add_u64(&raw mut (*entry).claims, 1);
        }
        return;
    }
    let first = Foreign {
        mac: sender,
        _pad: [0; 2],
        at_ns,
        claims: 1,
    };
    // Another CPU's insert first loses this one claim from the count; a
    // full map loses the news.
    let _ = map.insert(addr, first, u64::from(BPF_NOEXIST));
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}
