"""Which box `fab` drives: the current Pulumi stack's outputs, or a target file.

A target file is JSON with the stack output keys plus `sshPort` and `sshKeyPath`
(and optionally `boxRoot`, `containerEnv`, `dockerNetwork`): the keys of
`ops.target.schema.Target`'s fields, which ARCHITECTURE.md lists. It describes a box
Pulumi did not make: a lab GPU server, or the local sshd the tests start; without
`hosts`, this machine (`ops.target.local`, which the word `local` selects with its
defaults). `GLUCOSE_TARGET=FILE` selects one for every task
of a command line. Both sources are checked against `ops.target.schema` before
anything uses a value.

A stack of `nodeCount` boxes lists box 0's public address in `hosts` and every box's
private address in `privateHosts`: `fab` reaches box K > 0 through box 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from invoke.exceptions import Exit

from ops.target import local
from ops.target import schema as target_schema
from ops.target.schema import Target
from stack.outputs import StackOutput

TARGET_ENV = "GLUCOSE_TARGET"
PULUMI_TIMEOUT_SECONDS = 120
REQUIRED_KEYS = (StackOutput.HOSTS, StackOutput.SSH_USER, StackOutput.STORAGE_URI)


def from_outputs(
    outputs: dict[str, Any],
    source: str,
    target_file: Path | None = None,
    required: tuple[str, ...] = REQUIRED_KEYS,
) -> Target:
    """Build a Target from stack outputs / target-file keys (camelCase), each field from
    its key (`ops.target.schema.Target`); a relative sshKeyPath is relative to the
    target file."""
    missing = [key for key in required if not outputs.get(key)]
    if missing:
        raise Exit(f"{source}: missing {', '.join(missing)}; expected the keys in ARCHITECTURE.md")
    outputs = target_schema.json_fields(outputs, source)
    values: dict[str, Any] = {}
    for name, key in target_schema.KEYED_FIELDS.items():
        value = outputs.get(key.name)
        if value is None or (isinstance(value, str | list | dict) and not value):
            if key.absent is not target_schema.THE_DEFAULT:
                values[name] = key.absent
            continue  # the field's default
        values[name] = key.read(value)
    key_path = values.get("ssh_key_path")
    if key_path and not key_path.is_absolute() and target_file is not None:
        values["ssh_key_path"] = target_file.parent / key_path
    return Target(**values, source=source, target_file=target_file)


def load_target_file(path: Path) -> Target:
    """Read a target file; one-line errors for a missing or malformed one."""
    source = f"target file {path}"
    try:
        outputs = json.loads(path.read_text())
    except FileNotFoundError:
        raise Exit(f"{source} does not exist; expected JSON with the stack output keys") from None
    except json.JSONDecodeError as error:
        raise Exit(f"{source} is not valid JSON ({error}); fix it or unset {TARGET_ENV}") from None
    if not isinstance(outputs, dict):
        raise Exit(f"{source} holds {type(outputs).__name__}; expected a JSON object")
    target_schema.refuse_unknown_keys(outputs, source)
    if local.is_this_machine(outputs):
        outputs = local.this_machine_outputs(outputs, source)
        return from_outputs(outputs, source, target_file=path, required=())
    return from_outputs(outputs, source, target_file=path)


def stack_outputs(stack: str | None) -> dict[str, Any]:
    """`pulumi stack output --json [--stack S]`, or a one-line Exit saying what to run."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise Exit(
            "no target: the `pulumi` CLI is not installed and no target file is set; "
            f"install Pulumi and `pulumi up`, or point {TARGET_ENV}=FILE (or --target) "
            "at a target file"
        )
    command = [pulumi, "stack", "output", "--json", "--show-secrets"]
    if stack:
        command += ["--stack", stack]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=PULUMI_TIMEOUT_SECONDS, check=False
    )
    name = f"stack {stack}" if stack else "the current stack"
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise Exit(f"cannot read {name}'s outputs ({detail}); run `pulumi stack select` first")
    outputs = json.loads(result.stdout or "{}")
    if not outputs:
        raise Exit(f"{name} has no outputs: nothing is deployed yet; run `pulumi up` first")
    return outputs


def resolve_target(target: str | None = None, stack: str | None = None) -> Target:
    """`local` (this machine), the target file (`--target`, else GLUCOSE_TARGET) if any,
    else the Pulumi stack."""
    target_file = target or os.environ.get(TARGET_ENV)
    if target_file == local.LOCAL:
        return from_outputs(local.this_machine_outputs({}), local.SOURCE, required=())
    if target_file:
        return load_target_file(Path(target_file))
    return from_outputs(stack_outputs(stack), f"stack {stack or '(current)'}")
