//! tc programs without tcx: cls_bpf filters in direct-action mode on a
//! clsact qdisc, where the kernel lacks tcx links (before 6.6), as Cilium,
//! Katran and kube-vip attach there.
//!
//! A filter cannot be pinned like a link. ssh-fwd owns fixed slots
//! instead, a priority and a handle on each interface's ingress and
//! egress, and pins the program it put there beside the links
//! (`ingress-tc-clsact`, `egress-tc-clsact`, a pod's `pod-links/INDEX`),
//! which says the mechanism and keeps the program's id. A new agent adopts
//! the filter in its slot when the filter holds the pinned program (the
//! same id) or one of ssh-fwd's programs by name, and replaces its program
//! in place (`RTM_NEWTFILTER` without `NLM_F_CREATE`: cls_bpf swaps the
//! program under RCU, so no packet meets an empty slot). A filter of
//! anyone else in the slot is refused, never replaced; filters in other
//! slots are never touched, so a site's own filters and a CNI's stay.
//!
//! Both ingress and egress take the first slot here, unlike tcx where
//! egress goes last: a cls_bpf program that ends the chain with
//! `TC_ACT_OK` (as most do) keeps every later filter from running, and
//! replies must be restored. ssh-fwd's programs pass what is not theirs
//! with `TC_ACT_UNSPEC`, which lets the next filter run.
//!
//! Netlink here is synchronous (a socket per call): attaching runs in the
//! agent's start and resync, outside any reactor.

use std::{mem, path::Path};

use anyhow::{Context as _, bail};
use aya::programs::{
    ProgramInfo, SchedClassifier, TcAttachType,
    tc::{NlOptions, SchedClassifierLink, TcAttachOptions, TcHandle},
};
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::{
    RouteNetlinkMessage,
    tc::{TcAttribute, TcFilterBpfOption, TcHandle as NlHandle, TcMessage, TcOption},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use super::netdev;

/// The handle of every filter ssh-fwd owns ("55f0": ssh-fwd).
pub const HANDLE: u32 = 0x55f0;
/// The priority of the filters that must run first (DNAT on ingress,
/// reverse NAT on egress).
pub const FIRST_PRIORITY: u16 = 1;
/// The priority of the reply program on a pod's interface: after a
/// CNI's own filters (one that ends the chain leaves the reply to the
/// egress program).
pub const LAST_PRIORITY: u16 = 0xfff0;
/// Every program ssh-fwd attaches is named so (the filter's `TCA_BPF_NAME`).
const NAME_PREFIX: &str = "ssh_fwd_";

const TC_H_CLSACT: u32 = 0xffff_fff1;
const TC_H_MIN_INGRESS: u16 = 0xfff2;
const TC_H_MIN_EGRESS: u16 = 0xfff3;
const ETH_P_ALL: u16 = 0x0003;

/// One slot on one interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub attach: TcAttachType,
    pub priority: u16,
}

/// A cls_bpf filter read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub priority: u16,
    pub handle: u32,
    pub kind: String,
    pub name: String,
    pub prog_id: Option<u32>,
    pub tag: Option<u64>,
}

impl Filter {
    /// One of ssh-fwd's, by its slot's handle and its program's name.
    pub fn is_ssh_fwd(&self) -> bool {
        self.handle == HANDLE && self.kind == "bpf" && self.name.starts_with(NAME_PREFIX)
    }
}

/// Attaches `prog` in `slot` of `iface`, or swaps it into the filter a
/// previous agent left there, and pins it at `pin`.
pub fn attach(
    prog: &mut SchedClassifier,
    iface: &str,
    slot: Slot,
    pin: &Path,
) -> anyhow::Result<()> {
    let index = netdev::index(iface)?;
    add_clsact(index).with_context(|| format!("adding a clsact qdisc to {iface}"))?;
    let pinned_id = holds_program(pin)
        .then(|| ProgramInfo::from_pin(pin).ok().map(|p| p.id()))
        .flatten();
    let existing = filters(index, slot.attach)
        .with_context(|| format!("listing the tc filters of {iface}"))?
        .into_iter()
        .find(|f| f.priority == slot.priority && f.handle == HANDLE);
    let id = match existing {
        Some(f) if f.is_ssh_fwd() || (f.prog_id.is_some() && f.prog_id == pinned_id) => {
            let ours = prog.info().map(|i| i.tag()).ok();
            tracing::debug!(
                iface,
                priority = slot.priority,
                handle = HANDLE,
                old = f.name,
                same_program = ours.is_some() && ours == f.tag,
                "replacing the program of ssh-fwd's tc filter in place"
            );
            let link = SchedClassifierLink::attached(
                iface,
                slot.attach,
                slot.priority,
                TcHandle::from(HANDLE),
                None,
            )?;
            prog.attach_to_link(link)
                .with_context(|| format!("replacing ssh-fwd's tc filter on {iface}"))?
        }
        Some(f) => bail!(
            "{iface} has a tc filter of another program ({} {:?}) at priority {} handle {:#x}, \
             the slot ssh-fwd owns: remove it (`tc filter del dev {iface} {} pref {}`) or use a \
             kernel with tcx (6.6+)",
            f.kind,
            f.name,
            slot.priority,
            HANDLE,
            parent_word(slot.attach),
            slot.priority
        ),
        None => prog
            .attach_with_options(
                iface,
                slot.attach,
                TcAttachOptions::Netlink(NlOptions {
                    priority: slot.priority,
                    handle: TcHandle::from(HANDLE),
                    classid: None,
                }),
            )
            .with_context(|| {
                format!(
                    "attaching a cls_bpf filter to {iface} {} at priority {}",
                    parent_word(slot.attach),
                    slot.priority
                )
            })?,
    };
    let link = prog.take_link(id)?;
    // The filter holds the program and outlives the agent: dropping aya's
    // handle would delete it. The handle holds no descriptor, so nothing
    // leaks.
    #[expect(
        clippy::mem_forget,
        reason = "a netlink filter's handle deletes the filter on drop; it must stay"
    )]
    mem::forget(link);
    match std::fs::remove_file(pin) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", pin.display()));
        }
        _ => {}
    }
    prog.pin(pin)
        .with_context(|| format!("pinning the program at {}", pin.display()))?;
    Ok(())
}

/// Whether the pin at `pin` holds a program (a clsact filter's) rather
/// than a link (tcx's): the kernel names a descriptor's kind in its
/// `/proc/self/fd` link (`anon_inode:bpf-prog`, `anon_inode:bpf_link`).
/// Asking for the object's info would not tell: a link answers it too.
pub fn holds_program(pin: &Path) -> bool {
    use std::os::{fd::FromRawFd as _, unix::ffi::OsStrExt as _};
    let Ok(path) = std::ffi::CString::new(pin.as_os_str().as_bytes()) else {
        return false;
    };
    /// The prefix of `union bpf_attr` BPF_OBJ_GET reads.
    #[repr(C)]
    struct ObjGet {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    let mut attr = ObjGet {
        pathname: path.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    const BPF_OBJ_GET: libc::c_long = 7;
    // SAFETY: a BPF_OBJ_GET prefix whose path outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            std::ptr::from_mut(&mut attr),
            size_of::<ObjGet>(),
        )
    };
    let Ok(fd) = i32::try_from(rc) else {
        return false;
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: a new descriptor the kernel handed to us alone.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))
    .is_ok_and(|kind| kind.as_os_str() == "anon_inode:bpf-prog")
}

/// Deletes ssh-fwd's filter in `slot` of the interface `index`, if it is
/// there; anyone else's filter is left alone.
pub fn detach(index: u32, slot: Slot) -> anyhow::Result<bool> {
    let Some(filter) = filters(index, slot.attach)?
        .into_iter()
        .find(|f| f.priority == slot.priority && f.is_ssh_fwd())
    else {
        return Ok(false);
    };
    delete(index, slot.attach, filter.priority, filter.handle)?;
    Ok(true)
}

fn parent_word(attach: TcAttachType) -> &'static str {
    match attach {
        TcAttachType::Egress => "egress",
        _ => "ingress",
    }
}

fn parent(attach: TcAttachType) -> NlHandle {
    NlHandle {
        major: 0xffff,
        minor: match attach {
            TcAttachType::Egress => TC_H_MIN_EGRESS,
            _ => TC_H_MIN_INGRESS,
        },
    }
}

/// Adds a clsact qdisc; one already there is kept.
fn add_clsact(index: u32) -> anyhow::Result<()> {
    let mut msg = TcMessage::with_index(i32::try_from(index)?);
    msg.header.parent = NlHandle::from(TC_H_CLSACT);
    msg.header.handle = NlHandle {
        major: 0xffff,
        minor: 0,
    };
    msg.attributes.push(TcAttribute::Kind("clsact".into()));
    match request(
        RouteNetlinkMessage::NewQueueDiscipline(msg),
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
    ) {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other.map(drop).map_err(Into::into),
    }
}

/// The filters on the interface's ingress or egress.
pub fn filters(index: u32, attach: TcAttachType) -> anyhow::Result<Vec<Filter>> {
    let mut msg = TcMessage::with_index(i32::try_from(index)?);
    msg.header.parent = parent(attach);
    let answers = request(RouteNetlinkMessage::GetTrafficFilter(msg), NLM_F_DUMP)?;
    Ok(answers
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewTrafficFilter(m) => filter(&m),
            _ => None,
        })
        .collect())
}

/// A filter message read; the chain's head (handle 0) is none.
fn filter(m: &TcMessage) -> Option<Filter> {
    let handle = u32::from(m.header.handle);
    if handle == 0 {
        return None;
    }
    let mut f = Filter {
        priority: u16::try_from(m.header.info >> 16).ok()?,
        handle,
        kind: String::new(),
        name: String::new(),
        prog_id: None,
        tag: None,
    };
    for attr in &m.attributes {
        match attr {
            TcAttribute::Kind(kind) => f.kind.clone_from(kind),
            TcAttribute::Options(options) => {
                for option in options {
                    match option {
                        TcOption::Bpf(TcFilterBpfOption::ProgName(name)) => f.name.clone_from(name),
                        TcOption::Bpf(TcFilterBpfOption::ProgId(id)) => f.prog_id = Some(*id),
                        TcOption::Bpf(TcFilterBpfOption::ProgTag(tag)) => {
                            f.tag = Some(u64::from_be_bytes(*tag));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(f)
}

fn delete(index: u32, attach: TcAttachType, priority: u16, handle: u32) -> anyhow::Result<()> {
    let mut msg = TcMessage::with_index(i32::try_from(index)?);
    msg.header.parent = parent(attach);
    msg.header.handle = NlHandle::from(handle);
    msg.header.info = (u32::from(priority) << 16) | u32::from(ETH_P_ALL.to_be());
    request(RouteNetlinkMessage::DelTrafficFilter(msg), NLM_F_ACK)
        .with_context(|| format!("deleting tc filter priority {priority} handle {handle:#x}"))?;
    Ok(())
}

/// Sends one request and reads every answer up to its end (the DONE of a
/// dump, or the ACK); a NACK is the error.
fn request(msg: RouteNetlinkMessage, flags: u16) -> std::io::Result<Vec<RouteNetlinkMessage>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | flags;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0; packet.header.length as usize];
    packet.serialize(&mut buf);
    socket.send(&buf, 0)?;
    let mut out = Vec::new();
    loop {
        let (data, _) = socket.recv_from_full()?;
        let mut offset = 0;
        while offset < data.len() {
            let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[offset..])
                .map_err(std::io::Error::other)?;
            let length = m.header.length as usize;
            match m.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                // An ACK ends a request that is no dump.
                NetlinkPayload::Error(_) => return Ok(out),
                NetlinkPayload::InnerMessage(inner) => out.push(inner),
                _ => {}
            }
            if length == 0 {
                break;
            }
            offset += length;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bpf_filter(handle: u32, name: &str) -> Filter {
        Filter {
            priority: FIRST_PRIORITY,
            handle,
            kind: "bpf".into(),
            name: name.into(),
            prog_id: Some(7),
            tag: None,
        }
    }

    #[test]
    fn only_a_bpf_filter_of_ours_in_our_handle_is_ssh_fwds() {
        assert!(bpf_filter(HANDLE, "ssh_fwd_ingress_tc").is_ssh_fwd());
        assert!(!bpf_filter(1, "ssh_fwd_ingress_tc").is_ssh_fwd());
        assert!(!bpf_filter(HANDLE, "cil_from_netdev").is_ssh_fwd());
        let mut matchall = bpf_filter(HANDLE, "");
        matchall.kind = "matchall".into();
        assert!(!matchall.is_ssh_fwd());
    }

    #[test]
    fn a_filter_message_reads_back_priority_handle_name_id_and_tag() {
        let mut m = TcMessage::with_index(3);
        m.header.handle = NlHandle::from(HANDLE);
        m.header.info = (u32::from(FIRST_PRIORITY) << 16) | u32::from(ETH_P_ALL.to_be());
        m.attributes.push(TcAttribute::Kind("bpf".into()));
        m.attributes.push(TcAttribute::Options(vec![
            TcOption::Bpf(TcFilterBpfOption::ProgName("ssh_fwd_egress_tc".into())),
            TcOption::Bpf(TcFilterBpfOption::ProgId(42)),
            TcOption::Bpf(TcFilterBpfOption::ProgTag([0, 0, 0, 0, 0, 0, 1, 2])),
        ]));
        let f = filter(&m).unwrap();
        assert_eq!(f.priority, FIRST_PRIORITY);
        assert_eq!(f.handle, HANDLE);
        assert_eq!(f.name, "ssh_fwd_egress_tc");
        assert_eq!(f.prog_id, Some(42));
        assert_eq!(f.tag, Some(0x102));
        assert!(f.is_ssh_fwd());
        // The chain's head of a priority carries handle 0: no filter.
        m.header.handle = NlHandle::from(0);
        assert_eq!(filter(&m), None);
    }
}
