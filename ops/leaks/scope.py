"""Which stack `fab leaks` looks for, and where: read from the stack's config, not its
outputs (after `pulumi destroy` there are none).

The stack's name is the `cost-scope` tag every resource of it carries (`<project>/<stack>`,
`stack.config.StackConfig.tags`); its cloud and region are in `Pulumi.<stack>.yaml`,
which `pulumi destroy` leaves (only `pulumi stack rm` deletes it), or, without the file,
in what the `pulumi` CLI says of the stack.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from invoke.exceptions import Exit

from ops.preflight.checks import (
    StackSettings,
    settings_from_file,
    settings_from_pulumi,
    subscription_of,
)
from stack.config import COST_SCOPE_TAG, NAMESPACE, REGION_KEYS

PROJECT_FILE = "Pulumi.yaml"


@dataclass(frozen=True)
class StackScope:
    """One stack of this project in one region of one cloud."""

    stack: str
    cloud: str
    region: str
    aws_profile: str = ""
    subscription: str = ""
    """Azure: the stack's subscription, when its config or the environment names one."""

    @property
    def cost_scope(self) -> str:
        """The value of the `cost-scope` tag on everything the stack made."""
        return f"{NAMESPACE}/{self.stack}"

    @property
    def tag(self) -> tuple[str, str]:
        return COST_SCOPE_TAG, self.cost_scope

    def where(self) -> str:
        where = f"{self.cloud} {self.region}"
        return f"stack {self.stack} ({where}, tag {COST_SCOPE_TAG}={self.cost_scope})"


def stack_file(stack: str, start: Path | None = None) -> Path | None:
    """`Pulumi.<stack>.yaml` beside the project's Pulumi.yaml, from `start` (here) up."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            found = folder / f"Pulumi.{stack}.yaml"
            return found if found.is_file() else None
    return None


def settings(stack: str, config_file: str) -> StackSettings:
    """The stack's config: `config_file`, else `Pulumi.<stack>.yaml`, else the CLI's."""
    if config_file:
        return settings_from_file(Path(config_file))
    found = stack_file(stack) if stack else None
    if found:
        return settings_from_file(found)
    if shutil.which("pulumi") is None:
        missing = f"no Pulumi.{stack}.yaml beside Pulumi.yaml from here" if stack else "no --stack"
        raise Exit(
            f"fab leaks: {missing} and no `pulumi` CLI to ask; run it in the project folder "
            "with --stack NAME, or pass --config-file Pulumi.<stack>.yaml"
        )
    return settings_from_pulumi(stack or None)


def scope_of(chosen: StackSettings, region: str = "") -> StackScope:
    """The stack, its cloud and region (`region` overrides the config's); Exit in one
    line naming the key that is missing."""
    cloud = chosen.get(f"{NAMESPACE}:cloud")
    if cloud not in REGION_KEYS:
        raise Exit(
            f"fab leaks: stack {chosen.stack} has {NAMESPACE}:cloud {cloud!r}, expected one of "
            f"{', '.join(REGION_KEYS)}; pass --config-file with the stack's Pulumi.<stack>.yaml"
        )
    region = region or str(chosen.get(REGION_KEYS[cloud]) or "")
    if not region:
        raise Exit(
            f"fab leaks: stack {chosen.stack} names no region ({REGION_KEYS[cloud]}); pass --region"
        )
    return StackScope(
        stack=chosen.stack,
        cloud=cloud,
        region=region,
        aws_profile=str(chosen.get("aws:profile") or ""),
        subscription=subscription_of(chosen),
    )
