#![forbid(unsafe_code)]

pub mod image;
