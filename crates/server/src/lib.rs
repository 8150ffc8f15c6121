//! The `aleph` server as a library: the binary (`main.rs`) parses flags and calls [`startup::run`]; the
//! fuzz targets (`fuzz/`) drive the request decoders directly.

pub mod bench;
pub mod cli;
pub mod corpus;
pub mod eval;
pub mod fetch;
pub mod grpc;
pub mod http;
pub mod memory;
pub mod startup;
