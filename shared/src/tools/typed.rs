//! Typed tools: a tool declares its arguments as a Rust type, and its `inputSchema` is derived
//! from that type.
//!
//! The argument type derives [`serde::Deserialize`] and [`schemars::JsonSchema`]; its attributes
//! are the one place the limits live:
//!
//! ```ignore
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)] // -> "additionalProperties": false
//! pub struct Args {
//!     /// Text to hash first                       -> "description"
//!     #[schemars(length(max = 4096))]          // -> "maxLength": 4096
//!     seed: String,                            // no default -> "required"
//!     #[schemars(range(min = 1, max = 1000))]  // -> "minimum", "maximum"
//!     rounds: u64,
//!     #[serde(default)]                        // optional -> not "required", "default": 0
//!     pace_ms: u64,
//! }
//! ```
//!
//! The schema is derived once, at its first need (the first `tools/list`, or the first call of
//! the tool: never at a cold start), and served verbatim in `tools/list`.
//! [`Registry::validate`](super::Registry::validate) checks every call's arguments against it
//! at the edge, before any task exists, so a step receives arguments that already satisfy
//! every bound: it deserializes them ([`TypedTool::step`] gets `&Self::Args`) and never
//! re-checks a limit by hand.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Claim, Policy, Preflight, Tool, ToolDef};
use crate::jobs::{JobContext, JobError, Step};

/// A tool whose arguments are a Rust type. Register it with [`typed`]; test it with the kit
/// (`tools::testkit`).
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments: `Deserialize` + `JsonSchema`, with `#[serde(deny_unknown_fields)]` (so
    /// arguments nobody reads are refused, not stored with the task).
    type Args: DeserializeOwned + JsonSchema + Send + Sync;

    /// The tool's name in `tools/list` and `tools/call`.
    const NAME: &'static str;
    /// What the model reads about the tool.
    const DESCRIPTION: &'static str;
    /// Whether it runs as a task.
    const POLICY: Policy;

    /// Runs before a task is created (see [`Tool::preflight`]): the arguments are already
    /// valid; check what the schema cannot say (a client capability, say) or ask first.
    async fn preflight(
        &self,
        _args: &Self::Args,
        _ctx: &JobContext,
    ) -> Result<Preflight, JobError> {
        Ok(Preflight::Proceed(Value::Null))
    }

    /// One bounded step of the job (see [`Tool::step`] and [`crate::jobs`]).
    async fn step(&self, args: &Self::Args, ctx: &JobContext) -> Result<Step, JobError>;

    /// The work a call with these arguments claims (see [`Tool::claim`]).
    fn claim(&self, _args: &Self::Args) -> Claim {
        Claim::default()
    }
}

/// A typed tool behind the [`Tool`] interface the engine and the worker use.
struct Typed<T: TypedTool> {
    tool: T,
    /// Derived at the first [`Tool::def`].
    def: OnceLock<ToolDef>,
}

/// Registers a typed tool: wraps it as a [`Tool`] whose schema is derived at its first need
/// (deriving the demonstration tools' schemas was ~70 k instructions of a cold start).
pub fn typed<T: TypedTool>(tool: T) -> Arc<dyn Tool> {
    Arc::new(Typed {
        def: OnceLock::new(),
        tool,
    })
}

/// The `inputSchema` derived from an argument type: JSON Schema 2020-12 (the MCP default
/// dialect, so no `$schema` is written), without the root's `title` and `description` (the
/// Rust type's name and doc comment: they document the code, the tool's description says what
/// a call does) and without the `format` schemars gives numbers after their Rust width
/// (`uint64`, `double`): those are no JSON Schema formats, some model APIs refuse them, and
/// the bounds already say what matters. Everything else is what the type's attributes say.
pub fn input_schema<A: JsonSchema>() -> Value {
    let mut schema = SchemaSettings::draft2020_12()
        .with(|s| s.meta_schema = None)
        .with_transform(drop_number_formats)
        .into_generator()
        .into_root_schema_for::<A>();
    schema.remove("title");
    schema.remove("description");
    schema.to_value()
}

fn drop_number_formats(schema: &mut Schema) {
    let numeric = |t: &Value| matches!(t.as_str(), Some("integer" | "number"));
    let is_number = match schema.get("type") {
        Some(Value::Array(types)) => types.iter().any(numeric),
        Some(t) => numeric(t),
        None => false,
    };
    if is_number {
        schema.remove("format");
    }
    schemars::transform::transform_subschemas(&mut drop_number_formats, schema);
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn def(&self) -> &ToolDef {
        self.def.get_or_init(|| ToolDef {
            name: T::NAME,
            description: T::DESCRIPTION,
            input_schema: input_schema::<T::Args>(),
            policy: T::POLICY,
        })
    }

    fn name(&self) -> &'static str {
        T::NAME
    }

    async fn preflight(&self, ctx: &JobContext) -> Result<Preflight, JobError> {
        let args = args::<T>(ctx)?;
        self.tool.preflight(&args, ctx).await
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let args = args::<T>(ctx)?;
        self.tool.step(&args, ctx).await
    }

    fn claim(&self, arguments: &Value) -> Claim {
        // Called after the edge validated the arguments; anything else claims nothing (and is
        // refused anyway).
        crate::jobs::args::from_value::<T::Args>(arguments)
            .map_or_else(|_| Claim::default(), |a| self.tool.claim(&a))
    }
}

/// A typed tool's arguments, or the refusal the argument checker would word:
/// `Invalid arguments for tool hash_chain: arguments/rounds: …`.
fn args<T: TypedTool>(ctx: &JobContext) -> Result<T::Args, JobError> {
    ctx.args().map_err(|e| match e {
        JobError::InvalidParams(m) => {
            JobError::InvalidParams(format!("Invalid arguments for tool {}: {m}", T::NAME))
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    /// Documents the code, not the call.
    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Args {
        /// The text.
        #[schemars(length(max = 10))]
        text: String,
        #[schemars(range(min = 1, max = 5))]
        n: u32,
        #[serde(default)]
        x: Option<f64>,
        #[serde(default)]
        inner: Vec<Inner>,
        #[schemars(pattern(r"^[a-z]+$"), extend("x-mcp-header" = "Region"))]
        region: String,
        mode: Mode,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Inner {
        k: i64,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Fast,
        Slow,
    }

    struct Echo;

    #[async_trait]
    impl TypedTool for Echo {
        type Args = Args;
        const NAME: &'static str = "echo";
        const DESCRIPTION: &'static str = "Echoes.";
        const POLICY: Policy = Policy::Sync;
        async fn step(&self, a: &Args, _: &JobContext) -> Result<Step, JobError> {
            Ok(Step::Done(crate::jobs::text_result(&a.text)))
        }
    }

    #[test]
    fn the_schema_is_the_types_with_no_rust_names_or_widths() {
        let s = input_schema::<Args>();
        assert_eq!(
            s,
            json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "maxLength": 10, "description": "The text."},
                    "n": {"type": "integer", "minimum": 1, "maximum": 5},
                    "x": {"type": ["number", "null"], "default": null},
                    "inner": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
                    "region": {"type": "string", "pattern": "^[a-z]+$", "x-mcp-header": "Region"},
                    "mode": {"$ref": "#/$defs/Mode"}
                },
                "required": ["text", "n", "region", "mode"],
                "additionalProperties": false,
                "$defs": {
                    "Inner": {"type": "object", "properties": {"k": {"type": "integer"}},
                        "required": ["k"]},
                    "Mode": {"type": "string", "enum": ["fast", "slow"]}
                }
            })
        );
        crate::schema::Validator::new(&s).expect("compiles");
    }

    /// Arguments whose schema counts its derivations.
    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct Counted {
        n: u32,
    }

    static DERIVED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    impl JsonSchema for Counted {
        fn schema_name() -> std::borrow::Cow<'static, str> {
            "Counted".into()
        }
        fn json_schema(_: &mut schemars::SchemaGenerator) -> Schema {
            DERIVED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            schemars::json_schema!({"type": "object", "properties": {"n": {"type": "integer"}}})
        }
    }

    struct Lazy;

    #[async_trait]
    impl TypedTool for Lazy {
        type Args = Counted;
        const NAME: &'static str = "lazy";
        const DESCRIPTION: &'static str = "Derives its schema late.";
        const POLICY: Policy = Policy::Sync;
        async fn step(&self, _: &Counted, _: &JobContext) -> Result<Step, JobError> {
            Ok(Step::Done(crate::jobs::text_result("done")))
        }
    }

    #[test]
    fn a_registry_is_built_without_deriving_any_schema_and_derives_each_once() {
        use std::sync::atomic::Ordering::SeqCst;
        let registry = super::super::Registry::new(vec![typed(Lazy)]).checking_arguments();
        assert_eq!(registry.names(), ["lazy"]);
        assert!(registry.get("lazy").is_some());
        assert_eq!(
            DERIVED.load(SeqCst),
            0,
            "derived while the registry was built"
        );
        assert_eq!(registry.list()[0]["name"], "lazy");
        assert_eq!(registry.list()[0]["inputSchema"]["type"], "object");
        assert_eq!(DERIVED.load(SeqCst), 1);
        assert!(registry.mirrored_params("lazy").is_empty());
        assert_eq!(registry.validate("lazy", &json!({"n": 1})), Ok(()));
        assert_eq!(registry.get("lazy").unwrap().def().name, "lazy");
        assert_eq!(DERIVED.load(SeqCst), 1, "derived once");
    }

    #[test]
    fn the_registry_serves_validates_and_mirrors_the_derived_schema() {
        let registry = super::super::Registry::new(vec![typed(Echo)]).checking_arguments();
        let listed = &registry.list()[0];
        assert_eq!(listed["inputSchema"], input_schema::<Args>());
        assert_eq!(
            registry.mirrored_params("echo"),
            [("Region".to_owned(), "region".to_owned())]
        );
        let ok = json!({"text": "hi", "n": 1, "region": "eu", "mode": "fast"});
        assert_eq!(registry.validate("echo", &ok), Ok(()));
        let bad = json!({"text": "hi", "n": 9, "region": "EU", "mode": "fast"});
        let e = registry.validate("echo", &bad).unwrap_err();
        assert!(
            e.contains("arguments/n") && e.contains("arguments/region"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_integral_number_with_a_fraction_passes_both_checks() {
        // The checker counts 3.0 an integer (JSON Schema does); the step reads it into a u32.
        let registry = super::super::Registry::new(vec![typed(Echo)]).checking_arguments();
        let arguments = json!({"text": "hi", "n": 3.0, "region": "eu", "mode": "fast"});
        assert_eq!(registry.validate("echo", &arguments), Ok(()));
        let tool = registry.get("echo").expect("registered");
        assert!(matches!(
            tool.step(&context(arguments)).await,
            Ok(Step::Done(_))
        ));
    }

    #[tokio::test]
    async fn arguments_a_step_cannot_read_are_refused_by_name_and_place() {
        // What the worker would run had the stored arguments escaped the edge's check.
        let tool = typed(Echo);
        let arguments = json!({"text": "hi", "n": "3-secret", "region": "eu", "mode": "fast"});
        let Err(JobError::InvalidParams(e)) = tool.step(&context(arguments)).await else {
            panic!("the step read arguments it cannot")
        };
        assert_eq!(
            e,
            "Invalid arguments for tool echo: arguments/n: is a string, expected a non-negative \
             integer"
        );
    }

    fn context(arguments: Value) -> JobContext {
        let sink = crate::jobs::ProgressSink::latest_only();
        JobContext::new(
            arguments,
            Value::Null,
            Default::default(),
            Value::Null,
            sink,
        )
    }

    #[test]
    fn a_registry_that_does_not_check_arguments_refuses_every_call() {
        // The worker's and the tasks function's registries never take a call; one wired into
        // a host that does refuses it rather than pass arguments nobody checked.
        let registry = super::super::Registry::new(vec![typed(Echo)]);
        let ok = json!({"text": "hi", "n": 1, "region": "eu", "mode": "fast"});
        let e = registry.validate("echo", &ok).unwrap_err();
        assert_eq!(e, "Tool echo cannot take calls on this server");
        assert_eq!(
            registry.validate("unknown", &ok),
            Ok(()),
            "the caller refuses it"
        );
    }
}
