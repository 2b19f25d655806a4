//! The steps of a pass, one file each, in the order the driver runs them: select the class,
//! suspend, dependencies, identity and allowed images (in `select`), resolve, verify, unpack and
//! store, plan, approve, apply and prune, health; and uninstall on deletion. While new content
//! or a new spec is held back, `repair` restores drift of what is installed.

pub mod apply;
pub mod approve;
pub mod dependencies;
pub mod health;
pub mod plan;
pub mod repair;
pub mod resolve;
pub mod select;
pub mod suspend;
pub mod uninstall;
pub mod unpack;
pub mod verify;
