//! The process tier: every end-to-end test that runs Gantry's binaries as processes against a
//! real kube-apiserver + etcd and a real registry on loopback, in one test binary, one module
//! per area.
//!
//! Most tests share one control plane (`gantry_tests::control_plane()`), one registry
//! (`gantry_tests::registry()`) and one Gantry, a storage server and a provisioner
//! (`gantry_tests::e2e::gantry()`). A module whose provisioner must be the only one on its
//! cluster, runs with flags of its own, or must have none at all gets a control plane of its
//! own (`gantry_tests::e2e::Isolated`, a `static CLUSTER` in the module, and why in its
//! comment): check, helm_charts, helm_large_chart, install, leader, manifests, ordering, restart, sharding, smoke, tenancy, timing, ui (its page of 2,000 bundles), unpack_pods, wave_jobs, zero_values.

mod approval_race;
mod check;
mod connections;
mod crd_upgrade;
mod crd_versions;
mod deletion_policy;
mod demo;
mod docs_airgapped;
mod drift_report;
mod health;
mod health_quiet;
mod health_rules;
mod helm_charts;
mod helm_large_chart;
mod ignore;
mod install;
mod leader;
mod logs;
mod manifests;
mod object_policies;
mod ordering;
mod patches;
mod plugin;
mod plugin_approver;
mod plugin_conformance;
mod plugin_day_one;
mod plugin_failures;
mod provisioner;
mod pull_reuse;
mod registry;
mod registry_v1;
mod relocate;
mod restart;
mod sharding;
mod smoke;
mod status_rendered;
mod tenancy;
mod timing;
mod ui;
mod uninstall_order;
mod unpack_pods;
mod untrusted_input;
mod verify;
mod version_ranges;
mod wave_jobs;
mod while_failing;
mod zero_values;
