#![forbid(unsafe_code)]

pub mod controller;
