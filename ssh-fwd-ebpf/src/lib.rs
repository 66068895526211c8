//! Empty library target: it lets the userspace crate list this crate as a
//! build-dependency, so cargo rebuilds the programs when they change.
#![no_std]
