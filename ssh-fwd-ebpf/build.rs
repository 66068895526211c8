use which::which;

/// Rebuild the programs when bpf-linker changes: it is the linker, but cargo
/// does not track it.
fn main() {
    if let Ok(linker) = which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
