//! Compiles the BPF sampler (bpf/pyperf.bpf.c, CO-RE against the vendored bpf/vmlinux.h) and
//! generates its Rust skeleton into OUT_DIR. The skeleton's `types` module carries the structs
//! of bpf/pyperf.h, so Rust never hand-copies them.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "bpf/pyperf.bpf.c";
const HEADERS: &[&str] = &["bpf/pyperf.h", "bpf/vmlinux.h"];

fn main() {
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR must be set in build script")).join("pyperf.skel.rs");

    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(["-Ibpf", "-Wall", "-Werror"])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {SRC} failed (needs clang, libelf, zlib): {e:#}"));

    println!("cargo:rerun-if-changed={SRC}");
    for h in HEADERS {
        println!("cargo:rerun-if-changed={h}");
    }
}
