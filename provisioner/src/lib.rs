#![forbid(unsafe_code)]

pub mod controller;
pub mod run;
