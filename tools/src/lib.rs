//! The one place the Rust tools reach every server: the four Lambda functions' mains and
//! `mcp-tasks serve` take their tools from [`tools`], so a team adds a tool crate here (a
//! dependency in `tools/Cargo.toml` and one line below) and nowhere else — nothing in the core
//! library (`shared/`) changes. Tools that need no Rust are declared in a manifest instead
//! (docs/tool-manifest.md): the repository's `tools.toml` is bundled into the functions as
//! [`BUNDLED_MANIFEST`].

use std::sync::Arc;

pub use mcp_tasks_core::tools::Tool;

/// Which Rust tools a server serves: `TOOLS` on Lambda (`builtin`, the default, or
/// `conformance`), `--fixtures conformance` locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSet {
    /// The demonstration tools and yours (`TOOLS=builtin`, the default).
    Builtin,
    /// Exactly the official conformance suite's fixtures.
    Conformance,
}

/// The Rust tools of `set`, in `tools/list` order.
pub fn tools(set: ToolSet) -> Vec<Arc<dyn Tool>> {
    set.tools()
}

impl ToolSet {
    /// The Rust tools of this set, in `tools/list` order.
    pub fn tools(self) -> Vec<Arc<dyn Tool>> {
        match self {
            ToolSet::Builtin => {
                #[allow(unused_mut)]
                let mut tools = mcp_tasks_demo_tools::tools();
                // Your crates' tools, after a dependency in tools/Cargo.toml, e.g.:
                // tools.extend(acme_tools::tools());
                tools
            }
            ToolSet::Conformance => mcp_tasks_conformance_tools::tools(),
        }
    }
}

/// `TOOLS` is neither `builtin` nor `conformance` (shown as its sentence, also by `{:?}`: a
/// Lambda main returns it as the cold start's failure).
#[derive(Clone, PartialEq, Eq)]
pub struct UnknownToolSet;

impl std::fmt::Debug for UnknownToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for UnknownToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("environment variable TOOLS: must be builtin or conformance")
    }
}

impl std::error::Error for UnknownToolSet {}

impl ToolSet {
    /// The set named by `TOOLS` (unset or empty: the default).
    pub fn from_env() -> Result<Self, UnknownToolSet> {
        Self::named(std::env::var("TOOLS").ok().as_deref())
    }

    /// The Rust tools of the set `TOOLS` names: what a Lambda main passes on.
    pub fn tools_from_env() -> Result<Vec<Arc<dyn Tool>>, UnknownToolSet> {
        Ok(tools(Self::from_env()?))
    }

    /// The set a `TOOLS` value names.
    pub fn named(value: Option<&str>) -> Result<Self, UnknownToolSet> {
        match value.map(str::trim) {
            None | Some("") | Some("builtin") => Ok(Self::Builtin),
            Some("conformance") => Ok(Self::Conformance),
            Some(_) => Err(UnknownToolSet),
        }
    }
}

/// The repository's `tools.toml`, compiled into every function that serves or runs tools: the
/// declared tools a deployment serves unless `TOOLS_MANIFEST` names another file.
pub const BUNDLED_MANIFEST: &str = include_str!("../../tools.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sets_are_named_as_documented() {
        assert_eq!(ToolSet::named(None), Ok(ToolSet::Builtin));
        assert_eq!(ToolSet::named(Some("builtin")), Ok(ToolSet::Builtin));
        assert_eq!(
            ToolSet::named(Some(" conformance ")),
            Ok(ToolSet::Conformance)
        );
        assert_eq!(ToolSet::named(Some("all")), Err(UnknownToolSet));
        assert!(
            tools(ToolSet::Builtin)
                .iter()
                .any(|t| t.def().name == "wait")
        );
        assert_eq!(
            tools(ToolSet::Conformance)[0].def().name,
            "test_simple_text"
        );
    }

    #[test]
    fn the_bundled_manifest_reads() {
        mcp_tasks_core::declared::Manifest::parse(BUNDLED_MANIFEST, "tools.toml")
            .expect("the repository's tools.toml is a manifest");
    }
}
