//! Generates the agent contract into OUT_DIR. The client half is generated only with
//! the `client` feature and the server half only with `server`, so the guest agent
//! links no client code and the host CLI no server code.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Use the protoc that ships inside a crate, so a fresh machine needs no apt package,
    // unless the builder points PROTOC somewhere on purpose.
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
        unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    println!("cargo:rerun-if-changed=agent/v1/agent.proto");
    tonic_prost_build::configure()
        .build_client(std::env::var_os("CARGO_FEATURE_CLIENT").is_some())
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        // `bytes` fields as `Bytes`: a decoded chunk is a slice of the receive buffer
        // instead of a copy into a new `Vec` (a 1 MiB allocation per transfer chunk).
        .bytes(".")
        .compile_protos(&["agent/v1/agent.proto"], &["."])?;
    Ok(())
}
