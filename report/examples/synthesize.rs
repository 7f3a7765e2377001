//! Writes the synthetic recordings of the golden tests to testdata/synthetic/.
//!
//! `cargo run -p pyperf-report --example synthesize` — then regenerate the expected outputs with
//! `PYPERF_BLESS=1 cargo test -p pyperf-report --test golden` and review the diff.

#[path = "../tests/support/synth.rs"]
mod synth;

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/synthetic");
    std::fs::create_dir_all(&dir)?;
    for name in synth::RECORDINGS {
        let path = dir.join(format!("{name}.pyp"));
        let bytes = synth::recording(name);
        std::fs::write(&path, &bytes)?;
        println!("testdata/synthetic/{name}.pyp ({} bytes)", bytes.len());
    }
    Ok(())
}
