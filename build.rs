//! Generates the CRI client and server code from `proto/cri/api.proto` with no `protoc`.
//!
//! Messages come from protobuf-codegen 3 in pure mode. grpcio-compiler only speaks
//! protobuf 2 descriptors, so the parsed descriptor is re-encoded and decoded as the
//! protobuf 2 type before its service generator runs. Both outputs land in
//! `$OUT_DIR/cri/` with a `mod.rs` that `src/cri/mod.rs` includes.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

const PROTO_DIR: &str = "proto/cri";
const PROTO_FILE: &str = "proto/cri/api.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_FILE}");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?).join("cri");
    fs::create_dir_all(&out_dir)?;

    protobuf_codegen::Codegen::new()
        .pure()
        .include(PROTO_DIR)
        .input(PROTO_FILE)
        .out_dir(&out_dir)
        .run()?;

    generate_services(&out_dir)?;

    // Our own mod.rs: the codegen's one does not know about the service file.
    fs::write(out_dir.join("mod.rs"), "pub mod api;\npub mod api_grpc;\n")?;
    Ok(())
}

fn generate_services(out_dir: &Path) -> Result<(), Box<dyn Error>> {
    use protobuf::Message as _;
    let parsed = protobuf_parse::Parser::new()
        .pure()
        .include(PROTO_DIR)
        .input(PROTO_FILE)
        .parse_and_typecheck()?;

    let mut v2_files = Vec::new();
    for file in &parsed.file_descriptors {
        let bytes = file.write_to_bytes()?;
        let v2: protobufv2::descriptor::FileDescriptorProto =
            protobufv2::Message::parse_from_bytes(&bytes)?;
        v2_files.push(v2);
    }
    let wanted: Vec<String> = parsed
        .relative_paths
        .iter()
        .map(|p| p.to_str().to_owned())
        .collect();
    for generated in grpcio_compiler::codegen::gen(&v2_files, &wanted) {
        fs::write(out_dir.join(&generated.name), &generated.content)?;
    }
    Ok(())
}
