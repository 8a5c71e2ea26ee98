//! Compiles `cram.proto` with the pure-Rust `protox` (no `protoc` needed on the build machine).

fn main() {
    println!("cargo:rerun-if-changed=cram.proto");
    let files = protox::compile(["cram.proto"], ["."]).expect("cram.proto compiles");
    tonic_prost_build::configure().compile_fds(files).expect("code generation for cram.proto");
}
