"""A target: one box and its cloud, and the keys a target file and the stack outputs
give it, each field read from its key (`TargetKey`): one typed table.

A target file is passed around like a lab config: input from outside our trust.
Its values reach ssh's option parser, `docker` argv lists, remote shell lines and
registry logins, so each is checked here, once, for its JSON type (`json_fields`)
and its form (`check`, with the forms of `ops.target.forms`), with one-line errors
naming the file, the key, what was seen and what was expected. `containerEnv` values
are secrets: errors name their keys, never their values.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from invoke.exceptions import Exit

from box import contract
from box.watchdog_config import GUARD_SETTINGS
from ops.target.forms import (
    BOX_ID,
    DOCKER_NETWORK,
    ENV_NAME,
    SCHEDULE,
    TOKEN,
    USER_NAME,
    box_root_ok,
    is_host,
    is_private_address,
    registry_host,
    repository_ok,
    storage_uri_ok,
)
from stack import catalog
from stack.catalog import CLOUDS
from stack.config import webhook_ok, webhook_shown
from stack.outputs import StackOutput

NULL = type(None)
THE_DEFAULT = object()
"""An absent key reads as its field's default."""


@dataclass(frozen=True)
class TargetKey:
    """Where a Target field comes from: its key in the stack outputs and a target file,
    the JSON types it may hold (NULL: it may be null), and how its value is read."""

    name: str
    types: tuple[type, ...]
    read: Callable[[Any], Any]
    absent: Any = THE_DEFAULT
    """What a field without a default is when its key is absent or empty."""
    over_ssh: bool = False
    """It says how to reach a box over SSH: nonsense for this machine."""


_KEY = "target_key"


def _key(name: str, *types: type, read: Callable[[Any], Any], **given: Any) -> Any:
    """A Target field read from key `name`: absent, null or empty, it is the field's
    default (a given `default` or `default_factory`), or its `absent` value."""
    options = {k: given.pop(k) for k in ("default", "default_factory") if k in given}
    return field(**options, metadata={_KEY: TargetKey(name, types, read, **given)})


def _hosts(value: str | list) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _key_path(value: str) -> Path:
    return Path(os.path.expanduser(value))


def _environment(value: dict) -> dict[str, str]:
    return {str(name): str(text) for name, text in value.items()}


def _storage_uri(value: str) -> str:
    return str(value).rstrip("/")


@dataclass(frozen=True, kw_only=True)
class Target:
    """Everything `fab` needs to know about one box and its cloud. The fields read from
    a key stand in the order their keys are checked and listed."""

    cloud: str = _key(StackOutput.CLOUD, str, read=str, absent="local")
    hosts: tuple[str, ...] = _key(StackOutput.HOSTS, list, str, read=_hosts, absent=())
    ssh_user: str = _key(StackOutput.SSH_USER, str, read=str, absent="", over_ssh=True)
    ssh_port: int = _key("sshPort", int, read=int, default=22, over_ssh=True)
    ssh_key_path: Path | None = _key(
        "sshKeyPath", str, NULL, read=_key_path, default=None, over_ssh=True
    )
    """Relative in a target file: to the file (`ops.target.resolve.from_outputs`)."""
    storage_uri: str = _key(StackOutput.STORAGE_URI, str, read=_storage_uri, absent="")
    registry: str = _key(StackOutput.REGISTRY, str, NULL, read=str, default="")
    """Registry host (`<acct>.dkr.ecr.<region>.amazonaws.com`, `<name>.azurecr.io`,
    `127.0.0.1:5000`); empty means no registry: images travel by `docker save | load`."""
    image_repository: str = _key(
        StackOutput.IMAGE_REPOSITORY, str, NULL, read=str, default="glucose-training"
    )
    vm_size: str = _key(StackOutput.VM_SIZE, str, NULL, read=str, default="")
    gpu_count: int = _key(StackOutput.GPU_COUNT, int, read=int, default=0)
    hourly_price_usd: float = _key(
        StackOutput.HOURLY_PRICE_USD, int, float, read=float, default=0.0
    )
    spot: bool = _key(StackOutput.SPOT, bool, read=bool, default=False)
    box_root: str = _key("boxRoot", str, NULL, read=str, default=contract.BOX_ROOT)
    container_env: dict[str, str] = _key(
        "containerEnv", dict, NULL, read=_environment, default_factory=dict
    )
    """Extra environment for the trainer container (secrets: never in a message)."""
    docker_network: str = _key("dockerNetwork", str, NULL, read=str, default="")
    private_hosts: tuple[str, ...] = _key(
        StackOutput.PRIVATE_HOSTS, list, NULL, read=tuple, default=(), over_ssh=True
    )
    """Every box's private IP address, in rank order (box 0 first); () when the stack
    does not say (a target file whose `hosts` are the boxes' own addresses)."""
    box_ids: tuple[str, ...] = _key(StackOutput.BOX_IDS, list, NULL, read=tuple, default=())
    """Each box's cloud id (EC2 instance id, Azure VM resource id), rank order; () for a
    box no cloud knows of (a target file's), whose power `fab` cannot ask about."""
    region: str = _key(StackOutput.REGION, str, NULL, read=str, default="")
    max_run_hours: int = _key(StackOutput.MAX_RUN_HOURS, int, NULL, read=int, default=0)
    """The stack's cap on a run's deadline past the daily stop (`fab train --hours`)."""
    auto_recover: bool = _key(StackOutput.AUTO_RECOVER, bool, NULL, read=bool, default=False)
    """Whether the cloud starts a box again after an interruption until the deadline."""
    daily_stop_schedules: tuple[str, ...] = _key(
        StackOutput.DAILY_STOP_SCHEDULES, list, NULL, read=tuple, default=()
    )
    """The daily hard stop's schedules (AWS: one EventBridge schedule's name; Azure: each
    VM's DevTestLab schedule id), which `fab train --hours` moves."""
    auto_shutdown_time: str = _key("autoShutdownTime", str, NULL, read=str, default="")
    """HH:MM of the daily hard stop, in `auto_shutdown_time_zone` ("" when unknown)."""
    auto_shutdown_time_zone: str = _key("autoShutdownTimeZone", str, NULL, read=str, default="UTC")
    notify_webhook: str = _key(StackOutput.NOTIFY_WEBHOOK, str, NULL, read=str, default="")
    """Where a run's end is POSTed (`{"text": ...}`); on this machine and lab boxes
    ops.run.end_watch watches for it, on a stack's boxes the resume unit."""
    notify_topic_arn: str = _key(StackOutput.NOTIFY_TOPIC_ARN, str, NULL, read=str, default="")
    """AWS: the stack's SNS topic a box tells a run's end to; "" none."""
    placement: dict[str, str] = _key(
        StackOutput.PLACEMENT, dict, NULL, read=dict, default_factory=dict
    )
    """Where `pulumi up` launched the boxes: `{"size", "zone", "market"}`; {} unknown."""
    placement_tried: tuple[dict[str, str], ...] = _key(
        StackOutput.PLACEMENT_TRIED, list, NULL, read=tuple, default=()
    )
    """Every candidate in the order `pulumi up` tried them, with its refusal."""
    capacity_wait_minutes: int = _key(
        StackOutput.CAPACITY_WAIT_MINUTES, int, NULL, read=int, default=5
    )
    """How long `fab start` retries the same size before it resizes the boxes."""
    source: str
    """Where this came from, for messages: `stack dev` or `target file box.json`."""
    target_file: Path | None = None
    """The target file this came from; None for a Pulumi stack's outputs."""

    def __post_init__(self) -> None:
        check(self)

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


KEYED_FIELDS: dict[str, TargetKey] = {
    target_field.name: target_field.metadata[_KEY]
    for target_field in fields(Target)
    if _KEY in target_field.metadata
}
"""Each Target field read from a key, and its key, in the order they are checked."""
KEYS = {name: key.name for name, key in KEYED_FIELDS.items()}
"""Each Target field's key, by the field's name."""
SSH_KEYS = tuple(key.name for key in KEYED_FIELDS.values() if key.over_ssh)
# What a target file may name: the keys above, the guard settings `fab box-update` reads
# from it, and AWS's `amiId`, which a copy of `pulumi stack output --json` holds.
TARGET_FILE_KEYS = (
    *KEYS.values(),
    *(setting.stack_key for setting in GUARD_SETTINGS),
    StackOutput.AMI_ID,
)
# `local`: a box no cloud made (a lab server, this machine's sshd).
TARGET_CLOUDS = (*CLOUDS, "local")
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", dict: "an object", NULL: "null"}  # fmt: skip


def json_fields(outputs: dict[str, Any], source: str) -> dict[str, Any]:
    """`outputs` with every known key of its JSON type; Exit naming the first that is not.
    Unknown keys pass: a newer stack may export more than this `fab` reads."""
    for key in KEYED_FIELDS.values():
        if key.name not in outputs:
            continue
        value, types = outputs[key.name], key.types
        # bool is an int to Python, never to a target file's author.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            expected = " or ".join(_TYPE_NAMES[kind] for kind in types)
            raise Exit(f"{source}: {key.name} is {_shown(key.name, value)}; expected {expected}")
    for host in outputs.get(StackOutput.HOSTS) or []:
        if isinstance(outputs[StackOutput.HOSTS], list) and not isinstance(host, str):
            raise Exit(f"{source}: hosts holds {host!r}; expected a list of host names or IPs")
    for host in outputs.get(StackOutput.PRIVATE_HOSTS) or []:
        if not isinstance(host, str):
            raise Exit(f"{source}: privateHosts holds {host!r}; expected a list of IP addresses")
    for box_id in outputs.get(StackOutput.BOX_IDS) or []:
        if not isinstance(box_id, str):
            raise Exit(f"{source}: boxIds holds {box_id!r}; expected a list of cloud ids")
    for schedule in outputs.get(StackOutput.DAILY_STOP_SCHEDULES) or []:
        if not isinstance(schedule, str):
            raise Exit(f"{source}: dailyStopSchedules holds {schedule!r}; expected schedule ids")
    for entry in [
        outputs.get(StackOutput.PLACEMENT),
        *(outputs.get(StackOutput.PLACEMENT_TRIED) or []),
    ]:
        if entry is not None and not (
            isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values())
        ):
            raise Exit(
                f"{source}: placement/placementTried holds {entry!r}; expected objects of "
                'strings such as {"size": "g5.xlarge", "zone": "us-east-1a", "market": "spot"}'
            )
    for name, value in (outputs.get(KEYS["container_env"]) or {}).items():
        if isinstance(value, dict | list) or value is None:
            raise Exit(f'{source}: containerEnv.{name} is not a string; expected KEY: "value"')
    return outputs


def refuse_unknown_keys(outputs: dict[str, Any], source: str) -> None:
    """Exit on the first key a target file may not hold, with the known key nearest it:
    a misspelt `sshKeyPaht` would otherwise leave its value unused, silently."""
    for key in outputs:
        if key not in TARGET_FILE_KEYS:
            close = difflib.get_close_matches(key, TARGET_FILE_KEYS, n=1, cutoff=0.6)
            hint = (
                f"did you mean {close[0]}?"
                if close
                else f"known keys: {', '.join(TARGET_FILE_KEYS)}"
            )
            raise Exit(f"{source}: unknown key {key!r}; {hint}")


def _shown(key: str, value: Any) -> str:
    return "an object" if key == KEYS["container_env"] and isinstance(value, dict) else repr(value)


def problems(target: Target) -> list[str]:
    """What is wrong with the fields of a Target, one line each."""
    env = target.container_env
    bad_hosts = [host for host in target.hosts if not is_host(host)]
    bad_private = [host for host in target.private_hosts if not is_private_address(host)]
    rules = (
        (f"{KEYS['hosts']} entry", bad_hosts[:1], not bad_hosts,
         "an IP address or a DNS host name"),
        # No hosts: this machine (ops.target.local), which no SSH user reaches.
        (StackOutput.SSH_USER, target.ssh_user,
         not target.hosts or bool(USER_NAME.match(target.ssh_user)),
         "a user name (letters, digits, '_', '.', '-'; starting with a letter or '_')"),
        (KEYS["ssh_port"], target.ssh_port, 0 < target.ssh_port < 65536, "a TCP port (1-65535)"),
        (StackOutput.STORAGE_URI, target.storage_uri, storage_uri_ok(target.storage_uri),
         "file:///abs/path, s3://BUCKET[/PREFIX] or az://ACCOUNT/CONTAINER[/PREFIX]"),
        (StackOutput.REGISTRY, target.registry,
         not target.registry or registry_host(target.registry) is not None,
         "a registry host[:port], e.g. NAME.azurecr.io or 127.0.0.1:5000"),
        (StackOutput.IMAGE_REPOSITORY, target.image_repository,
         repository_ok(target.image_repository),
         "a repository such as glucose-training or REGISTRY/glucose-training "
         "(lowercase letters, digits, '.', '_', '-', '/')"),
        (StackOutput.VM_SIZE, target.vm_size,
         not target.vm_size or bool(TOKEN.match(target.vm_size)),
         "a VM size name"),
        (StackOutput.GPU_COUNT, target.gpu_count, target.gpu_count >= 0, "a count (>= 0)"),
        (StackOutput.HOURLY_PRICE_USD, target.hourly_price_usd,
         math.isfinite(target.hourly_price_usd) and target.hourly_price_usd >= 0,
         "a price in USD (>= 0)"),
        (KEYS["box_root"], target.box_root, box_root_ok(target.box_root),
         "an absolute path of plain names (letters, digits, '.', '_', '-')"),
        (StackOutput.CLOUD, target.cloud, target.cloud in TARGET_CLOUDS,
         f"one of {', '.join(TARGET_CLOUDS)}"),
        (f"{KEYS['container_env']} key", next((k for k in env if not ENV_NAME.match(k)), ""),
         all(ENV_NAME.match(name) for name in env),
         "an environment variable name (letters, digits, '_')"),
        (f"{KEYS['container_env']} value of",
         next((k for k, v in env.items() if _multiline(v)), ""),
         not any(_multiline(value) for value in env.values()), "one line (no newline or NUL)"),
        (KEYS["docker_network"], target.docker_network,
         not target.docker_network or bool(DOCKER_NETWORK.match(target.docker_network)),
         "a docker network name"),
        (f"{KEYS['private_hosts']} entry", bad_private[:1], not bad_private,
         "a private IP address (the boxes meet on their private network only)"),
        (f"{KEYS['box_ids']} entry", next((i for i in target.box_ids if not BOX_ID.match(i)), ""),
         all(BOX_ID.match(box_id) for box_id in target.box_ids),
         "an EC2 instance id (i-...) or an Azure VM resource id (/subscriptions/...)"),
        (StackOutput.BOX_IDS, len(target.box_ids),
         not target.box_ids or len(target.box_ids) == target.node_count,
         f"an id for each of the {target.node_count} boxes"),
        (f"{KEYS['daily_stop_schedules']} entry",
         next((s for s in target.daily_stop_schedules if not SCHEDULE.match(s)), ""),
         all(SCHEDULE.match(schedule) for schedule in target.daily_stop_schedules),
         "an EventBridge schedule name or an Azure schedule resource id (/subscriptions/...)"),
        (StackOutput.REGION, target.region, not target.region or bool(TOKEN.match(target.region)),
         "a region name"),
        # The URL is a credential: its host is shown, never its path.
        (StackOutput.NOTIFY_WEBHOOK, webhook_shown(target.notify_webhook),
         not target.notify_webhook or webhook_ok(target.notify_webhook, http_to_this_machine=True),
         "an https URL that takes a JSON POST (a Slack or Teams incoming webhook), or "
         "http to this machine (127.0.0.1, localhost)"),
        # Sizes and zones reach EC2's and ARM's requests of `fab start`.
        (f"{KEYS['placement']} entry",
         next((p for p in _placement_words(target) if not TOKEN.match(p)), ""),
         all(TOKEN.match(word) for word in _placement_words(target)),
         "a size, zone or market name (letters, digits, '.', '_', '-')"),
        (StackOutput.CAPACITY_WAIT_MINUTES, target.capacity_wait_minutes,
         0 <= target.capacity_wait_minutes <= 24 * 60, "minutes (0 to a day)"),
        (StackOutput.PRIVATE_HOSTS, len(target.private_hosts),
         not target.private_hosts or len(target.private_hosts) >= len(target.hosts),
         f"a private address for each of the {len(target.hosts)} hosts, box 0's first"),
    )  # fmt: skip
    return [f"{key} {value!r} is not {expected}" for key, value, ok, expected in rules if not ok]


def _placement_words(target: Target) -> list[str]:
    entries = [target.placement, *target.placement_tried] if target.placement else []
    return [
        entry.get(key) for entry in entries for key in ("size", "zone", "market") if entry.get(key)
    ]


def _multiline(value: str) -> bool:
    return "\n" in value or "\x00" in value


def check(target: Target) -> None:
    """Exit with the first problem of `target` (`problems`), naming its source."""
    if found := problems(target):
        raise Exit(f"{target.source}: {found[0]}")
