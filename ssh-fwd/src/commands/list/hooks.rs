//! `ssh-fwd list hooks`: the programs attached, where, and by which
//! mechanism.

use crate::datapath::stats::{self, Hook};

pub fn hooks_table(rows: &Vec<Hook>) -> String {
    let mut out = format!(
        "{:<14}  {:<16}  {:>7}  {:<9}  {}\n",
        "WHERE", "IFACE", "IFINDEX", "MECHANISM", "HOOK"
    );
    for h in rows {
        let target = match h.target {
            stats::Target::Interface => "interface",
            stats::Target::PodInterface => "pod interface",
            stats::Target::Cgroup => "cgroup",
        };
        let iface = if h.iface.is_empty() {
            "(gone)"
        } else {
            &h.iface
        };
        let index = h.ifindex.map_or("-".into(), |i| i.to_string());
        out.push_str(&format!(
            "{target:<14}  {iface:<16}  {index:>7}  {:<9}  {}\n",
            h.mechanism, h.hook
        ));
    }
    if rows.is_empty() {
        out.push_str("(nothing attached)\n");
    }
    out
}
