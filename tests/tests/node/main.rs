//! The node tier: tests on a real single-node cluster of processes on this machine (see
//! `gantry_tests::node_cluster`). Needs root and the packages `.ci/run` installs.

mod cluster;
mod gantry;
mod health;
mod helm;
mod helm_plugin;
mod metrics_server;
mod object_health;
mod operator_upgrade;
mod operator_webhook;
mod operators;
mod pull;
