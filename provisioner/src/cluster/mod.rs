//! Talking to the cluster about a bundle's objects: applying them in waves, waiting for their
//! CRDs, the dry run before the first write, reviewing access, reading live views, discovery,
//! the inventory, drift watches, the identities objects are applied as, the API server's
//! errors, and how Gantry writes its own objects.

pub mod access;
pub mod apply;
pub mod connection;
pub mod crds;
pub mod discovery;
pub mod drift;
pub mod dry_run;
pub mod errors;
pub mod events;
pub mod identity;
pub mod inventory;
pub mod jobs;
pub mod live;
pub mod preflight;
pub mod writes;
