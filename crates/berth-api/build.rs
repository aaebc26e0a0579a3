//! Compiles `proto/agent.proto` with protox (pure Rust: no `protoc` to install).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = protox::compile(["proto/agent.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Small stream buffers: see src/codec.rs.
        .codec_path("crate::codec::AgentCodec")
        .compile_fds(files)?;
    println!("cargo:rerun-if-changed=proto/agent.proto");
    Ok(())
}
