//! Handing freed heap back to the kernel after a one-off peak.
//!
//! glibc's malloc keeps freed memory in its arenas, and after a large
//! block is freed it raises its mmap threshold, so the next large blocks
//! come from the arenas too. A peak that happens once (aya parsing the
//! eBPF object at load; the first complete lists) would
//! then stay resident for the life of the process. musl's allocator
//! returns memory by itself and has no `malloc_trim`.
//!
//! glibc also gives each thread that meets contention an arena of its own,
//! each holding its own free memory. The long-running commands allocate
//! little and rarely at once, so one arena is enough: 2-3 MiB less resident
//! for the agent with 10,000 mappings (`cargo xtask bench convergence`),
//! no slower.

/// One malloc arena for the whole process. Call it early: arenas made
/// before it stay.
pub fn single_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: a documented malloc tunable, set before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Returns the free pages of every arena to the kernel. Cheap when there
/// is little to return; call it after a peak, not on a hot path.
pub fn release_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
