//! A durable MCP task server: MCP `2026-07-28` over Streamable HTTP with the
//! `io.modelcontextprotocol/tasks` extension (SEP-2663).
//!
//! Map of the crate, from the wire inwards:
//! - [`http`] — the one HTTP edge (an axum router), used locally and on Lambda alike;
//! - [`edge`] — the local server's listeners: header/body read and write timeouts, a cap on
//!   the answers queued for a client, a connection cap; the operators' metrics listener;
//! - [`handler`] — the HTTP-agnostic endpoint: validation, dispatch, errors → bytes (once);
//! - [`auth`] — the OAuth 2.1 resource server (bearer JWTs, tenant from a claim);
//! - [`protocol`] — JSON-RPC envelope, method names, typed requests, `_meta`, header rules, error
//!   codes, sealed `requestState`;
//! - [`engine`] — creating tasks and serving `tasks/get|update|cancel` over the ports;
//! - [`worker`] — running jobs under a lease, with checkpoints, cancellation and hand-over;
//! - [`jobs`] — the step-wise job API tools implement, and the one runner of its steps;
//! - [`tools`] — the Tool trait, typed tools, the tool registry, and (feature `testkit`) the
//!   kit that runs a tool in a test (the built-in tools and the conformance fixtures live in
//!   the `tools/` crates, outside this library);
//! - [`schema`] — the JSON Schema 2020-12 checker of tool arguments, for Rust tools and
//!   manifests alike;
//! - [`declared`] — tools from a manifest whose steps run elsewhere (a Lambda function, an
//!   HTTPS endpoint, a program, a Step Functions workflow) over the step protocol
//!   `mcp-tasks-step/1` ([`declared::step_protocol`]) or called plainly;
//! - [`task`] — the task record and its status machine, and its key;
//! - [`tenant`] — who owns a task: made at the edge, carried as a type below it;
//! - [`terminal`] — text from others made safe to show on a terminal or in a log;
//! - [`metrics`] — counters and timings, exported as Prometheus text and CloudWatch EMF;
//! - [`quota`] — per-tenant quotas and fair sharing (the fair gate of the worker and CPU pools);
//! - [`store`], [`queue`] — the ports, with local adapters (memory, embedded redb, in-process);
//! - [`app`] — the composition root: a [`app::Server`] built in one place from its ports,
//!   its settings and its tool sources, whichever host runs it;
//! - [`settings`] — each setting's flag, environment variable, default and bounds, once;
//! - [`local`] — the all-in-one embedded server behind `mcp-tasks serve`;
//! - [`admin`] — the operator commands behind `mcp-tasks tasks …` (list, show, cancel) over
//!   the ports, and opening a data directory's store without creating one;
//! - `fault` (feature `fault-injection`, tests only) — duplicate delivery and crash points;
//! - `aws` (feature `aws`) — the DynamoDB task store and SQS work queue adapters, and (feature
//!   `lambda`) the Lambda wiring the function crates run.
//!
//! Domain modules never touch a cloud SDK; cloud adapters live in their own modules.

#![warn(missing_docs)]

pub mod admin;
pub mod app;
pub mod auth;
#[cfg(feature = "aws")]
pub mod aws;
pub mod clock;
pub mod declared;
pub mod edge;
pub mod engine;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod handler;
pub mod http;
pub mod jobs;
pub mod local;
pub mod metrics;
pub mod protocol;
pub mod queue;
pub mod quota;
pub mod schema;
pub mod settings;
pub mod store;
pub mod task;
pub mod tenant;
pub mod terminal;
pub mod tools;
pub mod worker;
