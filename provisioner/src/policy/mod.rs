//! The ring of shards (the other rules are gantry-rules').

pub mod ring;
