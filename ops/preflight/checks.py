"""`fab preflight`: will `pulumi up` of this stack succeed, before anything is created?

Reads the stack's config (the current stack through `pulumi config --json`, or a
`Pulumi.<stack>.yaml` file), validates it exactly as the Pulumi program does, then asks
the cloud with the deployer's own credentials what only it knows: credentials, the
size in the region, GPU and address quotas, resource providers, the deployer's rights
and budget support (ops/preflight/aws.py, ops/preflight/azure.py). Every problem ends
up in one list, each with its fix. Cloud SDKs are imported only for the stack's cloud.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invoke.exceptions import Exit

from ops.preflight.findings import Findings
from stack import config as stack_config

PULUMI_TIMEOUT_SECONDS = 120
SUBSCRIPTION_KEYS = ("azure-native:subscriptionId",)
SUBSCRIPTION_ENV = ("ARM_SUBSCRIPTION_ID", "AZURE_SUBSCRIPTION_ID")


@dataclass(frozen=True)
class StackSettings:
    """A stack's raw config (provider keys included) and its name."""

    stack: str
    values: dict[str, Any]

    def get(self, key: str) -> Any:
        return self.values.get(key)


def subscription_of(settings: StackSettings) -> str:
    """The Azure subscription the stack names: its config's, else the environment's; ""
    when neither names one (then the login's only enabled one is taken)."""
    named = next((str(settings.get(k)) for k in SUBSCRIPTION_KEYS if settings.get(k)), "")
    return named or next((os.environ[k] for k in SUBSCRIPTION_ENV if os.environ.get(k)), "")


def error_line(error: BaseException) -> str:
    """The first line of what `error` says, else its kind: azure-identity's messages run
    to many lines, a one-line report takes the first."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def settings_from_file(path: Path) -> StackSettings:
    """`Pulumi.<stack>.yaml`'s `config:` block; the stack is named after the file."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise Exit(f"stack file {path} does not exist; expected a Pulumi.<stack>.yaml") from None
    except yaml.YAMLError as error:
        raise Exit(f"stack file {path} is not valid YAML ({error}); fix it and retry") from None
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")
    # A `--secret` value (`{secure: ...}`) opens only with the stack's key: `pulumi
    # preview` checks it, this file cannot.
    values = {
        key: value
        for key, value in dict(document.get("config") or {}).items()
        if not (isinstance(value, dict) and set(value) == {"secure"})
    }
    return StackSettings(stack, values)


def settings_from_pulumi(stack: str | None) -> StackSettings:
    """`pulumi config --json` of the current (or the named) stack."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise Exit(
            "the `pulumi` CLI is not installed; pass --config-file Pulumi.<stack>.yaml "
            "to check a stack file instead"
        )
    chosen = ["--stack", stack] if stack else []
    name = stack or _pulumi([pulumi, "stack", "--show-name"]).strip()
    raw = json.loads(_pulumi([pulumi, "config", "--json", *chosen]) or "{}")
    values = {
        key: entry.get("objectValue", entry.get("value")) if isinstance(entry, dict) else entry
        for key, entry in raw.items()
    }
    return StackSettings(name, values)


def _pulumi(command: list[str]) -> str:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=PULUMI_TIMEOUT_SECONDS, check=False
    )
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise Exit(f"`{' '.join(command[1:])}` failed ({detail}); run `pulumi stack select`")
    return result.stdout


def run(settings: StackSettings) -> Findings:
    """Validate the config, then check the cloud; every problem in one Findings."""
    prefix = f"{stack_config.NAMESPACE}:"
    raw = {k[len(prefix) :]: v for k, v in settings.values.items() if k.startswith(prefix)}
    cloud = raw.get("cloud")
    region_key = stack_config.REGION_KEYS.get(cloud) if isinstance(cloud, str) else None
    try:
        config = stack_config.validate(
            raw,
            settings.get(region_key) if region_key else None,
            project=stack_config.NAMESPACE,
            stack=settings.stack,
        )
    except stack_config.ConfigError as error:
        findings = Findings()
        for problem in error.problems:
            findings.problem_if(f"stack config: {problem}")
        return findings
    if config.cloud == "aws":
        return _aws(config, settings)
    return _azure(config, settings)


def _aws(config: Any, settings: StackSettings) -> Findings:
    import boto3

    from ops.preflight import aws as preflight_aws

    session = boto3.Session(
        profile_name=settings.get("aws:profile") or None, region_name=config.region
    )
    return preflight_aws.check(config, session)


def _azure(config: Any, settings: StackSettings) -> Findings:
    from ops import azure_login
    from ops.preflight import azure as preflight_azure
    from stack.arm import ArmClient

    try:
        token = azure_login.arm_token()
    except Exception as error:  # azure-identity raises its own kinds for every way it fails
        findings = Findings()
        findings.problem(
            f"no Azure credentials ({error_line(error)})",
            "run `az login` (or set AZURE_* for a service principal), then retry",
        )
        return findings
    arm = ArmClient.from_environment(token)
    return preflight_azure.check(config, arm, subscription_of(settings))
