//! Generates gRPC message and service code from the protos under `proto/`, with no
//! `protoc`.
//!
//! Each entry of [`PROTOS`] lands in `$OUT_DIR/<name>/`: the messages from
//! protobuf-codegen 3 (pure mode), the service stubs from grpcio-compiler, and a
//! `mod.rs` listing both that the owning module includes with `generated_proto!`
//! (`src/lib.rs`): `src/cri/mod.rs`, `src/prober/grpc_health.rs`,
//! `src/volumes/csi/mod.rs`, `src/devicemanager/mod.rs`,
//! `src/podresources/mod.rs`. grpcio-compiler only speaks protobuf 2 descriptors,
//! so each parsed descriptor is re-encoded and decoded as the protobuf 2 type before
//! its service generator runs.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

/// One proto to generate: output folder name, include folder, file (stem names the
/// generated modules: `<stem>` and `<stem>_grpc`).
struct Proto {
    name: &'static str,
    dir: &'static str,
    file: &'static str,
}

const PROTOS: &[Proto] = &[
    // CRI v1 (package runtime.v1): the runtime and image services.
    Proto {
        name: "cri",
        dir: "proto/cri",
        file: "api.proto",
    },
    // grpc.health.v1: what gRPC probes call.
    Proto {
        name: "grpc_health",
        dir: "proto/grpc",
        file: "health.proto",
    },
    // CSI spec v1.12.0 (package csi.v1): what the volume manager calls on drivers.
    Proto {
        name: "csi",
        dir: "proto/csi",
        file: "csi.proto",
    },
    // Kubelet plugin registration v1 (package pluginregistration): what the plugin
    // watcher calls on each registration socket.
    Proto {
        name: "pluginregistration",
        dir: "proto/pluginregistration",
        file: "api.proto",
    },
    // Device plugin API v1beta1 (package v1beta1): the Registration service litelet
    // serves and the DevicePlugin service it calls.
    Proto {
        name: "deviceplugin",
        dir: "proto/deviceplugin",
        file: "api.proto",
    },
    // PodResources API v1 (package v1): the PodResourcesLister service litelet
    // serves to monitoring agents.
    Proto {
        name: "podresources",
        dir: "proto/podresources",
        file: "api.proto",
    },
];

fn main() -> Result<(), Box<dyn Error>> {
    let out_root = PathBuf::from(std::env::var("OUT_DIR")?);
    for proto in PROTOS {
        generate(proto, &out_root.join(proto.name))?;
    }
    Ok(())
}

fn generate(proto: &Proto, out_dir: &Path) -> Result<(), Box<dyn Error>> {
    let input = Path::new(proto.dir).join(proto.file);
    println!("cargo:rerun-if-changed={}", input.display());
    fs::create_dir_all(out_dir)?;

    protobuf_codegen::Codegen::new()
        .pure()
        .include(proto.dir)
        .input(&input)
        .out_dir(out_dir)
        .run()?;

    generate_services(proto.dir, &input, out_dir)?;

    // Our own mod.rs: the codegen's one does not know about the service file.
    let stem = proto.file.trim_end_matches(".proto");
    fs::write(
        out_dir.join("mod.rs"),
        format!("pub mod {stem};\npub mod {stem}_grpc;\n"),
    )?;
    Ok(())
}

fn generate_services(include: &str, input: &Path, out_dir: &Path) -> Result<(), Box<dyn Error>> {
    use protobuf::Message as _;
    let parsed = protobuf_parse::Parser::new()
        .pure()
        .include(include)
        .input(input)
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
