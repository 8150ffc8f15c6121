#!/usr/bin/env bash
# Regenerates the gRPC code committed under crates/tei-proto/src and the descriptor set beside the proto,
# from crates/tei-proto/proto/tei.proto (TEI's proto, v1.9.3). Run it after changing the proto; the build itself
# needs neither protoc nor prost-build. Uses grpcio-tools from PyPI for protoc and tonic-prost-build in a
# scratch crate (about 2 minutes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q grpcio-tools==1.85.4
"$work/venv/bin/python" -m grpc_tools.protoc -I"$root/crates/tei-proto/proto" --include_imports \
  --descriptor_set_out="$root/crates/tei-proto/proto/tei_descriptor.bin" tei.proto
mkdir -p "$work/gen/src"
cat > "$work/gen/Cargo.toml" <<'TOML'
[package]
name = "gen"
version = "0.0.0"
edition = "2021"

[dependencies]
prost = "0.14"
prost-types = "0.14"
tonic-prost-build = "0.14"
TOML
cat > "$work/gen/src/main.rs" <<'RUST'
use prost::Message;

fn main() {
    let mut args = std::env::args().skip(1);
    let (descriptors, out) = (args.next().unwrap(), args.next().unwrap());
    let bytes = std::fs::read(descriptors).unwrap();
    let set = prost_types::FileDescriptorSet::decode(bytes.as_slice()).unwrap();
    tonic_prost_build::configure().build_client(false).build_server(true).out_dir(out).compile_fds(set).unwrap();
}
RUST
(cd "$work/gen" && cargo run -q --release -- "$root/crates/tei-proto/proto/tei_descriptor.bin" \
  "$root/crates/tei-proto/src")
echo "regenerated crates/tei-proto/src/tei.v1.rs and crates/tei-proto/proto/tei_descriptor.bin"
