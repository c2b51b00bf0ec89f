#!/usr/bin/env python3
"""The SAM transform of a template, offline: what CloudFormation would create from it.

    sam_transform.py TEMPLATE OUT.json [Key=Value ...]

Runs aws-sam-translator (the library behind CloudFormation's AWS::Serverless-2016-10-31
transform) with the given parameter values (the rest take their defaults, AuthMode=jwt unless
given) and writes the plain CloudFormation template: the REST APIs' deployments and stages,
the functions' execution roles and permissions, the schedule, none of which a scanner sees in
the SAM template itself. No AWS call: the managed policies SAM attaches by name (X-Ray's, with
Tracing) are given their well-known ARNs here instead of being looked up in IAM.

Run with the checkov venv's Python (scripts/lint-template.sh installs aws-sam-translator there).
"""
import json
import os
import sys

from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

# What SAM may attach by name; the aws partition's ARNs (a lookup would ask IAM).
MANAGED = {
    name: f"arn:aws:iam::aws:policy/{path}{name}"
    for name, path in [
        ("AWSLambdaBasicExecutionRole", "service-role/"),
        ("AWSXrayWriteOnlyAccess", ""),
        ("AWSXRayDaemonWriteAccess", ""),
        ("AWSLambdaSQSQueueExecutionRole", "service-role/"),
    ]
}


def main(argv):
    # Pseudo parameters (AWS::Region) need a region; nothing is asked of it.
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        template = yaml_parse(f.read())
    # As `sam package` would leave them: code in S3 (a placeholder; nothing reads it).
    for name, r in template.get("Resources", {}).items():
        props = r.get("Properties") or {}
        if r.get("Type") == "AWS::Serverless::Function" and not str(props.get("CodeUri", "")).startswith("s3://"):
            props["CodeUri"] = f"s3://placeholder/{name}.zip"
    params = {"AuthMode": "jwt"}
    params.update(a.split("=", 1) for a in argv[2:])
    out = Translator(MANAGED, Parser()).translate(template, params, passthrough_metadata=True,
                                                  get_managed_policy_map=lambda: MANAGED)
    with open(argv[1], "w") as f:
        json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
