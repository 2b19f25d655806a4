//! Health of what a bundle installed: kstatus rules per object, the `Healthy` condition, and
//! whether `Ready` waits for it.

pub mod kstatus;
