//! Generates the seqsvr.v1 gRPC code with a vendored `protoc`, so a fresh
//! machine needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Read at run time, not compile time: a build script compiled for one
    // checkout must not generate code from another's protos.
    let manifest = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = std::path::Path::new(&manifest).join("../../proto");
    let files = ["common", "ids", "store", "alloc", "sets"]
        .map(|f| root.join(format!("seqsvr/v1/{f}.proto")));
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure().compile_with_config(
        config,
        &files,
        std::slice::from_ref(&root),
    )?;
    println!("cargo:rerun-if-changed={}", root.display());
    Ok(())
}
