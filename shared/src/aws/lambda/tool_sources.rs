//! The tools of the mcp and worker functions: the Rust tools their `main` passes in (from
//! `tools/`), then the declared tools of the manifest — the bundled `tools.toml`, or the file
//! `TOOLS_MANIFEST` names — over `lambda` and `http` targets. A manifest that cannot be served
//! here fails the cold start, naming the entry: a `command` target (never on Lambda), a Lambda
//! function the role may not invoke (not in `TOOL_TARGET_FUNCTIONS`), a secret it may not read
//! (not in `TOOL_SECRET_ARNS`), a bad entry. The `http` targets' secrets are read at the first
//! step that needs each, never here: a cold start makes no network call for them.

use std::sync::Arc;

use super::Config;
use crate::app::{Lending, ToolSources, ToolSourcesError};
use crate::aws::lending::AwsLending;
use crate::declared::manifest::{HttpSecret, TargetKind};
use crate::declared::{Manifest, ManifestError};
use crate::tools::{Registry, Tool};

/// Why a function's tools cannot be served (shown as its sentence: a main returns it and the
/// runtime prints it with `{:?}` as the cold start's failure).
#[derive(thiserror::Error)]
pub enum ToolsError {
    /// The manifest, or one of its entries.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// An entry this function cannot run, or two tools of one name.
    #[error(transparent)]
    Sources(#[from] ToolSourcesError),
    /// A `lambda` target the role is not allowed to invoke.
    #[error(
        "{origin}: {entry} invokes {function}, which ToolTargetFunctions \
         (TOOL_TARGET_FUNCTIONS) does not list: the role may not invoke it (a grant covers \
         one function in one region and account, with the qualifier it names or none; a \
         name without them is this function's region and account)"
    )]
    NotGranted {
        /// The manifest.
        origin: String,
        /// The tool.
        entry: String,
        /// The function.
        function: String,
    },
    /// A `step_functions` target the role may not start.
    #[error(
        "{origin}: {entry} runs state machine {machine}, which ToolStateMachines \
         (TOOL_STATE_MACHINES) does not list: the role may not start it"
    )]
    MachineNotGranted {
        /// The manifest.
        origin: String,
        /// The tool.
        entry: String,
        /// The state machine.
        machine: String,
    },
    /// An `http` target's `secret_arn` the role is not allowed to read.
    #[error(
        "{origin}: {entry} reads secret {arn}, which ToolSecretArns (TOOL_SECRET_ARNS) does \
         not list: the role may not read it"
    )]
    SecretNotGranted {
        /// The manifest.
        origin: String,
        /// The tool.
        entry: String,
        /// The secret.
        arn: String,
    },
}

impl std::fmt::Debug for ToolsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The registry of the mcp function: `rust` and the manifest's tools, every input schema
/// compiled (a schema that does not compile fails the cold start), arguments checked.
pub async fn serving_tools(
    config: &Config,
    rust: Vec<Arc<dyn Tool>>,
    bundled: &str,
) -> Result<Arc<Registry>, ToolsError> {
    Ok(sources(config, rust, bundled)?.serving(&lending()).await?)
}

/// The registry of the worker function: the same tools, without the argument checker (the
/// worker never takes a call, so the checker stays out of its binary).
pub async fn running_tools(
    config: &Config,
    rust: Vec<Arc<dyn Tool>>,
    bundled: &str,
) -> Result<Arc<Registry>, ToolsError> {
    Ok(sources(config, rust, bundled)?.running(&lending()).await?)
}

fn sources(
    config: &Config,
    rust: Vec<Arc<dyn Tool>>,
    bundled: &str,
) -> Result<ToolSources, ToolsError> {
    Ok(ToolSources::rust(rust).with_manifest(manifest(config, bundled)?))
}

/// What a Lambda function lends declared targets: the AWS clients its manifest needs
/// ([`AwsLending::lambda`]), never a program.
fn lending() -> Lending {
    Lending {
        allow_commands: false,
        clients: Some(Arc::new(AwsLending::lambda())),
        ..Lending::default()
    }
}

/// The manifest this function serves, its Lambda targets checked against the grant.
fn manifest(config: &Config, bundled: &str) -> Result<Manifest, ToolsError> {
    let manifest = match &config.tools_manifest {
        Some(path) => Manifest::read(path)?,
        None => Manifest::parse(bundled, "the bundled tools.toml")?,
    };
    let home = Home::of(config);
    for e in &manifest.entries {
        match &e.target {
            TargetKind::Lambda(f)
                if !config
                    .tool_target_functions
                    .iter()
                    .any(|g| granted(g, f, &home)) =>
            {
                return Err(ToolsError::NotGranted {
                    origin: manifest.origin.clone(),
                    entry: format!("tool {}", e.name),
                    function: f.clone(),
                });
            }
            TargetKind::StepFunctions { machine, .. }
                if !config.tool_state_machines.contains(machine) =>
            {
                return Err(ToolsError::MachineNotGranted {
                    origin: manifest.origin.clone(),
                    entry: format!("tool {}", e.name),
                    machine: machine.clone(),
                });
            }
            TargetKind::Http {
                secret: Some(HttpSecret { arn: Some(arn), .. }),
                ..
            } if !config.tool_secret_arns.contains(arn) => {
                return Err(ToolsError::SecretNotGranted {
                    origin: manifest.origin.clone(),
                    entry: format!("tool {}", e.name),
                    arn: arn.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(manifest)
}

/// Where a function named without its region or account lives: this function's own region
/// (`AWS_REGION`) and account (that of its work queue, which the stack made beside it), as
/// Lambda resolves such a name. `None`: not known (not compared).
#[derive(Debug, Clone, Default, PartialEq)]
struct Home {
    region: Option<String>,
    account: Option<String>,
}

impl Home {
    fn of(config: &Config) -> Self {
        Self {
            region: config.region.clone(),
            account: queue_account(&config.queue_url),
        }
    }
}

/// The account of an SQS queue URL (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`).
fn queue_account(url: &str) -> Option<String> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let account = path.split('/').nth(1)?;
    (account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())).then(|| account.to_owned())
}

/// A Lambda function as Invoke names it: `NAME`, `ACCOUNT:function:NAME` or
/// `arn:PARTITION:lambda:REGION:ACCOUNT:function:NAME`, each with an optional `:QUALIFIER` (a
/// version or an alias).
#[derive(Debug, PartialEq)]
struct FunctionRef<'a> {
    partition: Option<&'a str>,
    region: Option<&'a str>,
    account: Option<&'a str>,
    name: &'a str,
    qualifier: Option<&'a str>,
}

impl<'a> FunctionRef<'a> {
    fn parse(s: &'a str) -> Option<Self> {
        let parts: Vec<&str> = s.split(':').collect();
        let (partition, region, account, rest) = match parts.as_slice() {
            [
                "arn",
                partition,
                "lambda",
                region,
                account,
                "function",
                rest @ ..,
            ] => (Some(*partition), Some(*region), Some(*account), rest),
            [account, "function", rest @ ..] => (None, None, Some(*account), rest),
            rest => (None, None, None, rest),
        };
        let (name, qualifier) = match rest {
            [name] => (*name, None),
            [name, qualifier] => (*name, Some(*qualifier)),
            _ => return None,
        };
        (!name.is_empty() && qualifier != Some("")).then_some(Self {
            partition,
            region,
            account,
            name,
            qualifier,
        })
    }
}

/// Whether granting `grant` (a function ARN, as IAM takes it) covers invoking `function` (as
/// the manifest names it), compared as Lambda and IAM compare them: the same name and the
/// same qualifier (an unqualified ARN does not cover `NAME:ALIAS`, nor a qualified one the
/// bare name), in the same region, account and partition — a name or partial ARN taken in
/// this function's region and account (`home`).
fn granted(grant: &str, function: &str, home: &Home) -> bool {
    let (Some(g), Some(f)) = (FunctionRef::parse(grant), FunctionRef::parse(function)) else {
        return false;
    };
    let (Some(g_region), Some(g_account)) = (g.region, g.account) else {
        // IAM takes a function's full ARN.
        return false;
    };
    let same = |named: Option<&str>, here: Option<&str>, granted: &str| {
        named.or(here).is_none_or(|v| v == granted)
    };
    g.name == f.name
        && g.qualifier == f.qualifier
        && same(f.region, home.region.as_deref(), g_region)
        && same(f.account, home.account.as_deref(), g_account)
        && same(f.partition, None, g.partition.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "arn:aws:lambda:eu-west-1:123456789012:function:report";

    fn home(region: &str, account: &str) -> Home {
        Home {
            region: Some(region.into()),
            account: Some(account.into()),
        }
    }

    #[test]
    fn a_grant_covers_its_arn_and_the_names_that_resolve_to_it() {
        let here = home("eu-west-1", "123456789012");
        for f in [REPORT, "report", "123456789012:function:report"] {
            assert!(granted(REPORT, f, &here), "{f}");
        }
        let live = "arn:aws:lambda:eu-west-1:123456789012:function:approve:live";
        for f in [live, "approve:live", "123456789012:function:approve:live"] {
            assert!(granted(live, f, &here), "{f}");
        }
        // Not known here: not compared.
        assert!(granted(REPORT, "report", &Home::default()));
    }

    #[test]
    fn a_qualifier_must_be_granted_as_such() {
        let here = home("eu-west-1", "123456789012");
        // IAM: the unqualified ARN does not cover an alias or a version, nor the reverse.
        assert!(!granted(REPORT, "report:prod", &here));
        assert!(!granted(REPORT, &format!("{REPORT}:prod"), &here));
        assert!(!granted(REPORT, "report:7", &here));
        assert!(!granted(&format!("{REPORT}:prod"), "report", &here));
        assert!(!granted(&format!("{REPORT}:prod"), "report:live", &here));
    }

    #[test]
    fn a_name_resolves_in_this_functions_region_and_account() {
        // A bare name here, in us-east-1, is us-east-1's `report`: an eu-west-1 grant does
        // not cover it.
        assert!(!granted(
            REPORT,
            "report",
            &home("us-east-1", "123456789012")
        ));
        assert!(!granted(
            REPORT,
            "123456789012:function:report",
            &home("us-east-1", "123456789012")
        ));
        // Another account: named, or resolved from this function's.
        assert!(!granted(
            REPORT,
            "report",
            &home("eu-west-1", "999999999999")
        ));
        assert!(!granted(
            REPORT,
            "999999999999:function:report",
            &home("eu-west-1", "123456789012")
        ));
        assert!(!granted(
            REPORT,
            "arn:aws:lambda:eu-west-1:999999999999:function:report",
            &home("eu-west-1", "123456789012")
        ));
        // Another partition.
        assert!(!granted(
            REPORT,
            "arn:aws-cn:lambda:eu-west-1:123456789012:function:report",
            &home("eu-west-1", "123456789012")
        ));
        // A full ARN elsewhere is what it says, wherever this function runs.
        assert!(granted(REPORT, REPORT, &home("us-east-1", "999999999999")));
    }

    #[test]
    fn other_names_and_malformed_ones_are_not_granted() {
        let here = home("eu-west-1", "123456789012");
        assert!(!granted(REPORT, "reports", &here));
        assert!(!granted(
            "arn:aws:lambda:eu-west-1:123456789012:function:other",
            "report",
            &here
        ));
        for bad in ["", "report:", "a:b:c", "report:prod:x", ":report"] {
            assert!(!granted(REPORT, bad, &here), "{bad:?}");
        }
        // A grant must be a function's ARN.
        assert!(!granted("report", "report", &here));
    }

    #[test]
    fn the_account_is_the_work_queues() {
        assert_eq!(
            queue_account("https://sqs.eu-west-1.amazonaws.com/123456789012/work").as_deref(),
            Some("123456789012")
        );
        assert_eq!(
            queue_account("http://127.0.0.1:4566/000000000000/q").as_deref(),
            Some("000000000000")
        );
        assert_eq!(queue_account("http://127.0.0.1:1/q"), None);
        assert_eq!(queue_account("nonsense"), None);
    }
}
