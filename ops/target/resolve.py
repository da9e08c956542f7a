"""Which box `fab` drives: the current Pulumi stack's outputs, or a target file.

A target file is JSON with the stack output keys plus `sshPort` and `sshKeyPath`
(and optionally `boxRoot`, `containerEnv`, `dockerNetwork`); ARCHITECTURE.md lists
them. It describes a box Pulumi did not make: a lab GPU server, or the local sshd
the tests start; without `hosts`, this machine (`ops.target.local`, which the word
`local` selects with its defaults). `GLUCOSE_TARGET=FILE` selects one for every task
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invoke.exceptions import Exit

from box import contract
from ops.target import local
from ops.target import schema as target_schema
from stack import catalog
from stack.outputs import StackOutput

TARGET_ENV = "GLUCOSE_TARGET"
PULUMI_TIMEOUT_SECONDS = 120
REQUIRED_KEYS = (StackOutput.HOSTS, StackOutput.SSH_USER, StackOutput.STORAGE_URI)


@dataclass(frozen=True)
class Target:
    """Everything `fab` needs to know about one box and its cloud."""

    cloud: str
    hosts: tuple[str, ...]
    ssh_user: str
    storage_uri: str
    source: str
    """Where this came from, for messages: `stack dev` or `target file box.json`."""
    ssh_port: int = 22
    ssh_key_path: Path | None = None
    registry: str = ""
    """Registry host (`<acct>.dkr.ecr.<region>.amazonaws.com`, `<name>.azurecr.io`,
    `127.0.0.1:5000`); empty means no registry: images travel by `docker save | load`."""
    image_repository: str = "glucose-training"
    vm_size: str = ""
    gpu_count: int = 0
    hourly_price_usd: float = 0.0
    spot: bool = False
    box_root: str = contract.BOX_ROOT
    container_env: dict[str, str] = field(default_factory=dict)
    docker_network: str = ""
    private_hosts: tuple[str, ...] = ()
    """Every box's private IP address, in rank order (box 0 first); () when the stack
    does not say (a target file whose `hosts` are the boxes' own addresses)."""
    box_ids: tuple[str, ...] = ()
    """Each box's cloud id (EC2 instance id, Azure VM resource id), rank order; () for a
    box no cloud knows of (a target file's), whose power `fab` cannot ask about."""
    region: str = ""
    max_run_hours: int = 0
    """The stack's cap on a run's deadline past the daily stop (`fab train --hours`)."""
    auto_shutdown_time: str = ""
    """HH:MM of the daily hard stop, in `auto_shutdown_time_zone` ("" when unknown)."""
    auto_shutdown_time_zone: str = "UTC"
    auto_recover: bool = False
    """Whether the cloud starts a box again after an interruption until the deadline."""
    daily_stop_schedules: tuple[str, ...] = ()
    """The daily hard stop's schedules (AWS: one EventBridge schedule's name; Azure: each
    VM's DevTestLab schedule id), which `fab train --hours` moves."""
    notify_webhook: str = ""
    """Where a run's end is POSTed (`{"text": ...}`); on this machine and lab boxes
    ops.run.end_watch watches for it, on a stack's boxes the resume unit."""
    target_file: Path | None = None
    """The target file this came from; None for a Pulumi stack's outputs."""
    placement: dict[str, str] = field(default_factory=dict)
    """Where `pulumi up` launched the boxes: `{"size", "zone", "market"}`; {} unknown."""
    placement_tried: tuple[dict[str, str], ...] = ()
    """Every candidate in the order `pulumi up` tried them, with its refusal."""
    capacity_wait_minutes: int = 5
    """How long `fab start` retries the same size before it resizes the boxes."""

    def __post_init__(self) -> None:
        target_schema.check(self)

    @property
    def host(self) -> str:
        """The box `fab` talks to (the first, rank-0 box of a multi-node stack)."""
        return self.hosts[0]

    @property
    def this_machine(self) -> bool:
        """No hosts: the local target, this machine's own Docker engine (no SSH)."""
        return not self.hosts

    @property
    def set_up_by_cloud_init(self) -> bool:
        """A box `pulumi up` made: its cloud-init writes BOX_ROOT/ready once set up. Any
        other (a lab box, this machine) has no boot to wait for and no guard rails."""
        return self.cloud in catalog.CLOUDS

    @property
    def node_count(self) -> int:
        """The boxes of the stack: every private address, else every host (this
        machine is one)."""
        return len(self.private_hosts) or len(self.hosts) or 1

    def ssh_route(self, node: int) -> tuple[str, str | None]:
        """(host, gateway) for box `node`: a host of its own in `hosts`, else its private
        address reached through box 0 (SSH ProxyJump)."""
        if not 0 <= node < self.node_count:
            raise Exit(
                f"{self.source} has {self.node_count} box(es): no node {node}; "
                f"expected 0..{self.node_count - 1}"
            )
        if node < len(self.hosts):
            return self.hosts[node], None
        return self.private_hosts[node], self.hosts[0]

    def private_address(self, node: int) -> str:
        """Where the other boxes reach box `node`: its private address, or its host."""
        return (self.private_hosts or self.hosts)[node]

    @property
    def image_name(self) -> str:
        """`registry/repository` to tag and push, or the bare repository without one."""
        if self.registry and not self.image_repository.startswith(self.registry + "/"):
            return f"{self.registry}/{self.image_repository}"
        return self.image_repository


def from_outputs(
    outputs: dict[str, Any],
    source: str,
    target_file: Path | None = None,
    required: tuple[str, ...] = REQUIRED_KEYS,
) -> Target:
    """Build a Target from stack outputs / target-file keys (camelCase); a relative
    sshKeyPath is relative to the target file."""
    missing = [key for key in required if not outputs.get(key)]
    if missing:
        raise Exit(f"{source}: missing {', '.join(missing)}; expected the keys in ARCHITECTURE.md")
    outputs = target_schema.json_fields(outputs, source)
    hosts = outputs.get(StackOutput.HOSTS) or []
    private_hosts = outputs.get(StackOutput.PRIVATE_HOSTS) or []
    key_path = outputs.get("sshKeyPath")
    if key_path:
        key_path = Path(os.path.expanduser(key_path))
        if not key_path.is_absolute() and target_file is not None:
            key_path = target_file.parent / key_path
    return Target(
        cloud=str(outputs.get(StackOutput.CLOUD) or "local"),
        hosts=tuple([hosts] if isinstance(hosts, str) else hosts),
        ssh_user=str(outputs.get(StackOutput.SSH_USER) or ""),
        storage_uri=str(outputs[StackOutput.STORAGE_URI]).rstrip("/"),
        source=source,
        ssh_port=int(outputs.get("sshPort", 22)),
        ssh_key_path=key_path,
        registry=str(outputs.get(StackOutput.REGISTRY) or ""),
        image_repository=str(outputs.get(StackOutput.IMAGE_REPOSITORY) or "glucose-training"),
        vm_size=str(outputs.get(StackOutput.VM_SIZE) or ""),
        gpu_count=int(outputs.get(StackOutput.GPU_COUNT, 0)),
        hourly_price_usd=float(outputs.get(StackOutput.HOURLY_PRICE_USD, 0.0)),
        spot=bool(outputs.get(StackOutput.SPOT, False)),
        box_root=str(outputs.get("boxRoot") or contract.BOX_ROOT),
        container_env={str(k): str(v) for k, v in (outputs.get("containerEnv") or {}).items()},
        docker_network=str(outputs.get("dockerNetwork") or ""),
        private_hosts=tuple(private_hosts),
        box_ids=tuple(outputs.get(StackOutput.BOX_IDS) or ()),
        region=str(outputs.get(StackOutput.REGION) or ""),
        max_run_hours=int(outputs.get(StackOutput.MAX_RUN_HOURS) or 0),
        auto_shutdown_time=str(outputs.get("autoShutdownTime") or ""),
        auto_shutdown_time_zone=str(outputs.get("autoShutdownTimeZone") or "UTC"),
        auto_recover=bool(outputs.get(StackOutput.AUTO_RECOVER)),
        daily_stop_schedules=tuple(outputs.get(StackOutput.DAILY_STOP_SCHEDULES) or ()),
        notify_webhook=str(outputs.get(StackOutput.NOTIFY_WEBHOOK) or ""),
        target_file=target_file,
        placement=dict(outputs.get(StackOutput.PLACEMENT) or {}),
        placement_tried=tuple(outputs.get(StackOutput.PLACEMENT_TRIED) or ()),
        capacity_wait_minutes=_or(outputs.get(StackOutput.CAPACITY_WAIT_MINUTES), 5),
    )


def _or(value: Any, default: int) -> int:
    """`value` as a whole number, `default` when absent (0 is a value)."""
    return default if value is None else int(value)


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
