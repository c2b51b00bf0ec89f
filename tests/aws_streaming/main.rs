//! The mcp function behind API Gateway's streaming integration (`ResponseTransferMode:
//! STREAM`), through the emulated Lambda environment of tests/support_aws: JSON answers are
//! the same bytes as behind the buffered integration, and a synchronous call of a client
//! without the tasks extension streams its progress while it runs, past API Gateway's 29 s
//! buffered limit, up to the function's `STREAM_SECONDS`, where it ends with `-32021`.
//!
//! Needs the DynamoDB/SQS emulator, like tests/aws_functions/ (without it: a loud SKIPPED
//! line, or a failure with `REQUIRE_EMULATORS`):
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks --all-features --test aws_streaming -- --nocapture
//! ```
//!
//! By subject: JSON answers on both integrations (`identical.rs`), long synchronous calls
//! (`long_calls.rs`), and `subscriptions/listen` (`subscriptions.rs`).

#[path = "../../shared/tests/common/mod.rs"]
mod common;
#[path = "../support/mod.rs"]
mod support;
#[path = "../support_aws/mod.rs"]
mod support_aws;

mod identical;
mod long_calls;
mod subscriptions;
