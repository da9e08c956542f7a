"""The schema of a target file, and of the stack outputs read the same way.

A target file is passed around like a lab config: input from outside our trust.
Its values reach ssh's option parser, `docker` argv lists, remote shell lines and
registry logins, so each is checked here, once, for its JSON type (`json_fields`)
and its form (`check`), with one-line errors naming the file, the key, what was
seen and what was expected. The forms are narrow on purpose: a host is an IP
address or a DNS name, a user a POSIX-style name, a registry `host[:port]`, a box
root a plain absolute path; none can begin with `-` or hold a shell metacharacter.
`containerEnv` values are secrets: errors name their keys, never their values.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from typing import Any

from invoke.exceptions import Exit

from box.watchdog_config import GUARD_SETTINGS
from stack.catalog import CLOUDS
from stack.config import webhook_ok, webhook_shown
from stack.outputs import StackOutput

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
# Docker's reference grammar for a repository path (distribution/reference).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_PATH = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DOCKER_NETWORK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
BOX_ROOT = re.compile(r"^(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)+$")
TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
STORAGE_URI_CHARS = re.compile(r"^[A-Za-z0-9:/._~%@+=-]+$")
# An EC2 instance id, or an Azure VM's resource id (ARM paths: never a shell word).
BOX_ID = re.compile(
    r"^(?:i-[0-9a-f]{8,17}|/subscriptions/[A-Za-z0-9-]{1,64}/resourceGroups/[\w.()-]{1,90}"
    r"/providers/Microsoft\.Compute/virtualMachines/[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
)
# An EventBridge schedule's name, or an Azure VM's DevTestLab shutdown schedule id.
SCHEDULE = re.compile(
    r"^(?:[A-Za-z0-9_.-]{1,64}|/subscriptions/[A-Za-z0-9-]{1,64}/resourceGroups/[\w.()-]{1,90}"
    r"/providers/Microsoft\.DevTestLab/schedules/shutdown-computevm-[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
)

# JSON types per key; None marks a key that may be null (absent).
_TYPES: dict[str, tuple[type, ...]] = {
    StackOutput.CLOUD: (str,),
    StackOutput.HOSTS: (list, str),
    StackOutput.SSH_USER: (str,),
    "sshPort": (int,),
    "sshKeyPath": (str, type(None)),
    StackOutput.STORAGE_URI: (str,),
    StackOutput.REGISTRY: (str, type(None)),
    StackOutput.IMAGE_REPOSITORY: (str, type(None)),
    StackOutput.VM_SIZE: (str, type(None)),
    StackOutput.GPU_COUNT: (int,),
    StackOutput.HOURLY_PRICE_USD: (int, float),
    StackOutput.SPOT: (bool,),
    "boxRoot": (str, type(None)),
    "containerEnv": (dict, type(None)),
    "dockerNetwork": (str, type(None)),
    StackOutput.PRIVATE_HOSTS: (list, type(None)),
    StackOutput.BOX_IDS: (list, type(None)),
    StackOutput.REGION: (str, type(None)),
    StackOutput.MAX_RUN_HOURS: (int, type(None)),
    StackOutput.AUTO_RECOVER: (bool, type(None)),
    StackOutput.DAILY_STOP_SCHEDULES: (list, type(None)),
    "autoShutdownTime": (str, type(None)),
    "autoShutdownTimeZone": (str, type(None)),
    StackOutput.NOTIFY_WEBHOOK: (str, type(None)),
    StackOutput.NOTIFY_TOPIC_ARN: (str, type(None)),
    StackOutput.PLACEMENT: (dict, type(None)),
    StackOutput.PLACEMENT_TRIED: (list, type(None)),
    StackOutput.CAPACITY_WAIT_MINUTES: (int, type(None)),
}
# What a target file may name: the keys above, the guard settings `fab box-update` reads
# from it, and AWS's `amiId`, which a copy of `pulumi stack output --json` holds.
TARGET_FILE_KEYS = (*_TYPES, *(setting.stack_key for setting in GUARD_SETTINGS), StackOutput.AMI_ID)
# `local`: a box no cloud made (a lab server, this machine's sshd).
TARGET_CLOUDS = (*CLOUDS, "local")
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", dict: "an object", type(None): "null"}  # fmt: skip


def json_fields(outputs: dict[str, Any], source: str) -> dict[str, Any]:
    """`outputs` with every known key of its JSON type; Exit naming the first that is not.
    Unknown keys pass: a newer stack may export more than this `fab` reads."""
    for key, types in _TYPES.items():
        if key not in outputs:
            continue
        value = outputs[key]
        # bool is an int to Python, never to a target file's author.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            expected = " or ".join(_TYPE_NAMES[kind] for kind in types)
            raise Exit(f"{source}: {key} is {_shown(key, value)}; expected {expected}")
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
    for name, value in (outputs.get("containerEnv") or {}).items():
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
    return "an object" if key == "containerEnv" and isinstance(value, dict) else repr(value)


def problems(target) -> list[str]:
    """What is wrong with the fields of a Target (`ops.target.Target`), one line each."""
    env = target.container_env
    bad_hosts = [host for host in target.hosts if not is_host(host)]
    bad_private = [host for host in target.private_hosts if not is_private_address(host)]
    rules = (
        ("hosts entry", bad_hosts[:1], not bad_hosts, "an IP address or a DNS host name"),
        # No hosts: this machine (ops.target.local), which no SSH user reaches.
        (StackOutput.SSH_USER, target.ssh_user,
         not target.hosts or bool(USER_NAME.match(target.ssh_user)),
         "a user name (letters, digits, '_', '.', '-'; starting with a letter or '_')"),
        ("sshPort", target.ssh_port, 0 < target.ssh_port < 65536, "a TCP port (1-65535)"),
        (StackOutput.STORAGE_URI, target.storage_uri, _storage_uri_ok(target.storage_uri),
         "file:///abs/path, s3://BUCKET[/PREFIX] or az://ACCOUNT/CONTAINER[/PREFIX]"),
        (StackOutput.REGISTRY, target.registry,
         not target.registry or registry_host(target.registry) is not None,
         "a registry host[:port], e.g. NAME.azurecr.io or 127.0.0.1:5000"),
        (StackOutput.IMAGE_REPOSITORY, target.image_repository,
         _repository_ok(target.image_repository),
         "a repository such as glucose-training or REGISTRY/glucose-training "
         "(lowercase letters, digits, '.', '_', '-', '/')"),
        (StackOutput.VM_SIZE, target.vm_size,
         not target.vm_size or bool(TOKEN.match(target.vm_size)),
         "a VM size name"),
        (StackOutput.GPU_COUNT, target.gpu_count, target.gpu_count >= 0, "a count (>= 0)"),
        (StackOutput.HOURLY_PRICE_USD, target.hourly_price_usd,
         math.isfinite(target.hourly_price_usd) and target.hourly_price_usd >= 0,
         "a price in USD (>= 0)"),
        ("boxRoot", target.box_root, _box_root_ok(target.box_root),
         "an absolute path of plain names (letters, digits, '.', '_', '-')"),
        (StackOutput.CLOUD, target.cloud, target.cloud in TARGET_CLOUDS,
         f"one of {', '.join(TARGET_CLOUDS)}"),
        ("containerEnv key", next((k for k in env if not ENV_NAME.match(k)), ""),
         all(ENV_NAME.match(name) for name in env),
         "an environment variable name (letters, digits, '_')"),
        ("containerEnv value of", next((k for k, v in env.items() if _multiline(v)), ""),
         not any(_multiline(value) for value in env.values()), "one line (no newline or NUL)"),
        ("dockerNetwork", target.docker_network,
         not target.docker_network or bool(DOCKER_NETWORK.match(target.docker_network)),
         "a docker network name"),
        ("privateHosts entry", bad_private[:1], not bad_private,
         "a private IP address (the boxes meet on their private network only)"),
        ("boxIds entry", next((i for i in target.box_ids if not BOX_ID.match(i)), ""),
         all(BOX_ID.match(box_id) for box_id in target.box_ids),
         "an EC2 instance id (i-...) or an Azure VM resource id (/subscriptions/...)"),
        (StackOutput.BOX_IDS, len(target.box_ids),
         not target.box_ids or len(target.box_ids) == target.node_count,
         f"an id for each of the {target.node_count} boxes"),
        ("dailyStopSchedules entry",
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
        ("placement entry", next((p for p in _placement_words(target) if not TOKEN.match(p)), ""),
         all(TOKEN.match(word) for word in _placement_words(target)),
         "a size, zone or market name (letters, digits, '.', '_', '-')"),
        (StackOutput.CAPACITY_WAIT_MINUTES, target.capacity_wait_minutes,
         0 <= target.capacity_wait_minutes <= 24 * 60, "minutes (0 to a day)"),
        (StackOutput.PRIVATE_HOSTS, len(target.private_hosts),
         not target.private_hosts or len(target.private_hosts) >= len(target.hosts),
         f"a private address for each of the {len(target.hosts)} hosts, box 0's first"),
    )  # fmt: skip
    return [f"{key} {value!r} is not {expected}" for key, value, ok, expected in rules if not ok]


def _placement_words(target) -> list[str]:
    entries = [target.placement, *target.placement_tried] if target.placement else []
    return [
        entry.get(key) for entry in entries for key in ("size", "zone", "market") if entry.get(key)
    ]


def _multiline(value: str) -> bool:
    return "\n" in value or "\x00" in value


def check(target) -> None:
    """Exit with the first problem of `target` (`problems`), naming its source."""
    if found := problems(target):
        raise Exit(f"{target.source}: {found[0]}")


def is_host(host: str) -> bool:
    """An IP address (v4 or v6) or a DNS name: never an ssh option, never a shell word."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(HOST_NAME.match(host))
    return True


def is_private_address(host: str) -> bool:
    """A private (or loopback) IP address: where the boxes of one stack meet."""
    try:
        return ipaddress.ip_address(host).is_private
    except ValueError:
        return False


def registry_host(registry: str) -> str | None:
    """The lowercase host of a registry written `host[:port]`; None for any other form
    (a path, a user, a scheme): the caller must not guess which host it means."""
    host, sep, port = registry.rpartition(":") if ":" in registry else (registry, "", "")
    if sep and not (port.isdigit() and 0 < int(port) < 65536):
        return None
    return host.lower() if is_host(host) else None


TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def image_reference_ok(reference: str) -> bool:
    """`[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]`, Docker's grammar: never an option."""
    name, _, digest = reference.partition("@")
    if digest and not DIGEST.match(digest):
        return False
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    return _repository_ok(repository) and (not tag or bool(TAG.match(tag)))


def _storage_uri_ok(uri: str) -> bool:
    from trainer.storage import StorageError, parse_uri

    if not STORAGE_URI_CHARS.match(uri):
        return False
    try:
        location = parse_uri(uri)
    except StorageError:
        return False
    return ".." not in f"{location.path}/{location.prefix}".split("/")


def _repository_ok(repository: str) -> bool:
    """A repository path, optionally after a registry host (the stacks export
    `REGISTRY/glucose-training`): Docker's rule, a first part with '.' or ':' is a host."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return registry_host(first) is not None and bool(REPOSITORY_PATH.match(rest))
    return bool(REPOSITORY_PATH.match(repository))


def _box_root_ok(box_root: str) -> bool:
    return bool(BOX_ROOT.match(box_root)) and ".." not in box_root.split("/")
