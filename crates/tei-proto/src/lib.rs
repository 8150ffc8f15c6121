//! TEI's gRPC API (`tei.v1`): the messages and service traits prost and tonic generate from proto/tei.proto
//! (scripts/gen-grpc.sh regenerates them; the build needs no protoc), and the proto's descriptors for the
//! reflection service. The services themselves are aleph-server's (crates/server/src/grpc).

#![allow(clippy::all, clippy::pedantic, missing_docs, unused_qualifications)]

include!("tei.v1.rs");

/// The proto's descriptors (`FileDescriptorSet`), for gRPC reflection.
pub const DESCRIPTOR_SET: &[u8] = include_bytes!("../proto/tei_descriptor.bin");
