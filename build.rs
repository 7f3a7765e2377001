//! Compiles the BPF sampler (bpf/pyperf.bpf.c, one compilation unit that includes its parts, bpf/*.bpf.h, against
//! the vendored bpf/vmlinux.h; no CO-RE relocations, see record/sampler/kernel.rs) and
//! generates its Rust skeleton into OUT_DIR. The skeleton's `types` module carries the structs
//! of bpf/pyperf.h, so Rust never hand-copies them.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "bpf/pyperf.bpf.c";
/// `pyperf dump --native`'s task iterator (its own small object: `record` does not load it).
const REGS_SRC: &str = "bpf/regs.bpf.c";
/// What both include lives here too (the ABI, the sampler's parts, the benchmark hooks, the kernel's types): any
/// change under it rebuilds, so a new part needs no line here.
const BPF_DIR: &str = "bpf";

fn main() {
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR must be set in build script")).join("pyperf.skel.rs");

    // PYPERF_BPF_CFLAGS: extra clang flags for benchmark-only variants of the BPF program (bench/run.sh builds
    // one with -DPYPERF_BENCH_INTERN into its own target directory). Unset for every shipped build.
    let mut clang_args: Vec<String> = ["-Ibpf", "-Wall", "-Werror"].iter().map(|s| s.to_string()).collect();
    if let Some(extra) = env::var_os("PYPERF_BPF_CFLAGS") {
        clang_args.extend(extra.to_string_lossy().split_whitespace().map(str::to_string));
    }
    println!("cargo:rerun-if-env-changed=PYPERF_BPF_CFLAGS");

    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(clang_args.clone())
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {SRC} failed (needs clang, libelf, zlib): {e:#}"));
    SkeletonBuilder::new()
        .source(REGS_SRC)
        .clang_args(clang_args)
        .build_and_generate(out.with_file_name("regs.skel.rs"))
        .unwrap_or_else(|e| panic!("building {REGS_SRC} failed (needs clang, libelf, zlib): {e:#}"));

    // A directory: cargo scans every file under it.
    println!("cargo:rerun-if-changed={BPF_DIR}");
}
