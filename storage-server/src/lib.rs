//! Gantry's storage server: content-addressed bundle tarballs on a local
//! volume, served over HTTP with Kubernetes authentication.
#![forbid(unsafe_code)]

pub mod auth;
pub mod http;
pub mod metrics;
pub mod range;
pub mod server;
pub mod stall;
pub mod store;

pub use server::{AuthConfig, Config, Server, ServerError, TlsFiles};
pub use store::TransferLimits;
