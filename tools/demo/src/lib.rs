//! The demonstration tools: each shows one path through the engine, doing real, checkable work.
//! They are Rust tools like yours, in a crate of their own outside the core library; the
//! `mcp-tasks-tools` crate (`tools/src/lib.rs`) lists them for every server.
//!
//! | tool | policy | shows |
//! |---|---|---|
//! | `hash_chain` | optional task | CPU-bound chunks off the async threads, progress, checkpoints, resume after a crash |
//! | `wait` | optional task | a long I/O-bound wait; many run at once |
//! | `confirm_action` | optional task | `input_required` (task) or SEP-2322 rounds (synchronous) |
//! | `lint_json` | sync | a tool error the model reads (`isError: true`) |
//! | `unreliable_upstream` | task only | a protocol-level failure (`failed` with a JSON-RPC error) |
//!
//! Each tool is one file here: a [`TypedTool`](mcp_tasks_core::tools::TypedTool) (a unit
//! struct) with its argument type, and its tests through the kit
//! (`mcp_tasks_core::tools::testkit`). A new tool is that file plus one line, `file::Type,`,
//! in the list below (which declares the module and registers the tool, in `tools/list`
//! order).

use std::sync::Arc;

use mcp_tasks_core::tools::Tool;

/// Declares each tool's module and lists the tools, in order.
macro_rules! demo_tools {
    ($($module:ident :: $tool:ident),+ $(,)?) => {
        $(pub mod $module;)+

        /// The demonstration tools, in `tools/list` order.
        pub fn tools() -> Vec<Arc<dyn Tool>> {
            vec![$(mcp_tasks_core::tools::typed($module::$tool)),+]
        }
    };
}

demo_tools! {
    hash_chain::HashChain,
    wait::Wait,
    confirm_action::ConfirmAction,
    lint_json::LintJson,
    unreliable_upstream::UnreliableUpstream,
}

/// docs/add-a-tool.md's Rust example, compiled and tested (not served: `wait` shows the same
/// path).
#[cfg(test)]
mod countdown_example;

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_core::tools::Registry;

    #[test]
    fn every_demo_schema_is_a_closed_object_that_compiles() {
        let tools = tools();
        let n = tools.len();
        let registry = Registry::new(tools);
        assert_eq!(registry.names().len(), n, "no duplicate names");
        for t in registry.list().as_array().unwrap() {
            let schema = &t["inputSchema"];
            assert_eq!(schema["type"], "object", "{}", t["name"]);
            assert_eq!(schema["additionalProperties"], false, "{}", t["name"]);
            mcp_tasks_core::schema::Validator::new(schema).expect("compiles");
        }
    }
}
