//! Decisions made from data alone, without a cluster, shared by every part of Gantry: the
//! provisioner, the kubectl plugin (its commands and review page) and the provisioner plugins.
//! Nothing here talks to an API server; every rule is tested without one.

pub mod duration;
pub mod health_policy;
