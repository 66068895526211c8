//! Reloads at the maps' full capacity against the kernel's real maps: a
//! full hash map refuses a new key, so every step must make room first.

use std::net::{Ipv4Addr, SocketAddrV4};

use ssh_fwd::mapping::{Mapping, MappingSet};
use ssh_fwd_common::maps::MAX_MAPPINGS;
use ssh_fwd_tests::privilege;

use super::{install, load};

const MAX: usize = MAX_MAPPINGS as usize;

/// Mapping `i`, its backend in generation `g`.
fn nth(i: usize, g: u8) -> Mapping {
    let port = u16::try_from(8000 + i % 20_000).expect("port");
    let ip = Ipv4Addr::new(198, 18, 0, 10 + u8::try_from(i / 20_000).expect("ip"));
    let backend = Ipv4Addr::new(10, 200 + g, (i / 250) as u8, (i % 250 + 1) as u8);
    Mapping {
        guard: Default::default(),
        name: format!("m{i}").into(),
        frontend: SocketAddrV4::new(ip, port).into(),
        backend: SocketAddrV4::new(backend, 22).into(),
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn at_16384_mappings_moving_half_replacing_one_and_replacing_all_each_take_one_reload() {
    privilege::require();
    let mut loaded = load(&[]);
    let maps = &mut loaded.maps;
    let full = MappingSet::from_unique((0..MAX).map(|i| nth(i, 0)));
    let half_moved = MappingSet::from_unique((0..MAX).map(|i| nth(i, u8::from(i % 2 == 0))));
    let one_replaced = MappingSet::from_unique(
        (1..MAX)
            .map(|i| nth(i, u8::from(i % 2 == 0)))
            .chain([nth(MAX, 0)]),
    );
    let all_replaced = MappingSet::from_unique((MAX..2 * MAX).map(|i| nth(i, 2)));
    for (what, set) in [
        ("fill", &full),
        ("move half", &half_moved),
        ("replace one", &one_replaced),
        ("replace all", &all_replaced),
    ] {
        let expected = install(maps, set);
        let now = maps.read_installed().expect("read");
        assert_eq!(now.frontends, expected.frontends, "{what}");
        assert_eq!(now.reverse, expected.reverse, "{what}");
        assert_eq!(now.frontends.len(), MAX, "{what}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tables_sized_by_max_mappings_fill_in_one_batch_and_a_write_past_them_names_the_entry() {
    use ssh_fwd::datapath::{object, plan::Plan};

    privilege::require();
    let settings = object::Settings {
        max_mappings: 5,
        ..object::Settings::default()
    };
    let mut loaded = super::load_with(&[], settings);
    let maps = &mut loaded.maps;
    assert_eq!(maps.capacity(), 5);
    let five = MappingSet::from_unique((0..5).map(|i| nth(i, 0)));
    let expected = install(maps, &five);
    assert_eq!(
        maps.read_installed().expect("read").frontends,
        expected.frontends
    );
    // A plan that does not fit (the planner never makes one): the batch
    // stops at the sixth entry and the error names it.
    let sixth = nth(5, 0);
    let target = *expected.frontends.values().next().expect("an entry");
    let overflow = Plan {
        frontend_upserts: vec![(sixth.frontend, target)],
        ..Plan::default()
    };
    let e = format!("{:#}", maps.apply(&overflow).unwrap_err());
    assert!(
        e.contains("writing FRONTENDS entry for 198.18.0.10:8005")
            && e.contains("0 of 1 entries written"),
        "{e}"
    );
}
