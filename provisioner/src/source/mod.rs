//! Where a bundle's content comes from and is kept: the registry, the storage server, and
//! unpack Pods on a node (`pullMode: Node`).

pub mod node_pull;
pub mod plugin;
pub mod pulled;
pub mod registry;
pub mod render;
pub mod storage;
