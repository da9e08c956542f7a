"""Read and validate the stack config (namespace `glucose-training:`) before any resource.

`validate()` is a pure function of plain values (testable without Pulumi); it collects
every problem and raises one `ConfigError` listing them all, so a newcomer fixes the
whole stack file in one round instead of one `pulumi up` per mistake.
The Pulumi program reads the stack into it (`pulumi/infra/stack_config.py`), and `fab
preflight` reads a stack file into it: both see the same problems.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from typing import Any

from box.watchdog_config import DAILY_TIME, GUARD_SETTINGS, GuardSetting, guard_problems
from stack import catalog, cloud_limits
from stack.cloud_limits import REGION_KEYS

NAMESPACE = "glucose-training"

ANYWHERE_CIDRS = ("0.0.0.0/0", "*", "internet", "any")
# A prefix shorter than this admits a sizeable part of the internet (a /1 is half of
# it), so it needs allowSshFromAnywhere just like 0.0.0.0/0 does.
NARROWEST_BROAD_PREFIX = 8
PRINCIPAL_TYPES = ("User", "ServicePrincipal")
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
SSH_KEY_TYPES = ("ssh-rsa", "ssh-ed25519")  # what both Azure and EC2 accept for Linux
MAX_NODE_COUNT = 16
# 64 GB: the Azure Ubuntu HPC image's own disk, and room for a ~10 GB CUDA image and a
# cached dataset. 4095 GB: the largest boot disk both clouds take.
OS_DISK_SIZE_GB_RANGE = (64, 4095)
# How far `fab train --hours` may push a run's cloud-side hard stop past the daily one:
# a forgotten deadline costs at most this long (3 days by default, a week at most).
MAX_RUN_HOURS_RANGE = (1, 7 * 24)
_EMAIL = re.compile(r"^[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+$")
_OWNER_TAG = re.compile(r"^[\w.@+\- ]{1,128}$")
# On the storage of both clouds; the policy pack's storage-deleted-on-destroy advisory
# reads it, since Pulumi's retain_on_delete is not among a resource's properties.
KEEP_ON_DESTROY_TAG = "keep-on-destroy"
# One tag whose value names project and stack: AWS budget filters OR the values of a tag
# filter, so `stack=dev` alone would count every project's `dev`.
COST_SCOPE_TAG = "cost-scope"


# --- how a key's value is read: Pulumi stores text, a YAML list as JSON text ---------


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"got {value!r}, expected text")
    return value.strip()


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"got {value!r}, expected true or false")


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"got {value!r}, expected a whole number")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"got {value!r}, expected a whole number") from None


def _amount(value: Any) -> float:
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError(f"got {value!r}, expected an amount in USD such as 200") from None


def _listed(value: Any, what: str) -> tuple[str, ...]:
    """A YAML list (Pulumi hands it over as JSON text) or a comma-separated string."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"got {value!r}, expected a list of {what}") from None
    if isinstance(value, str):
        value = value.split(",")
    # Numbers too: a YAML list of Azure zones is [1, 2, 3].
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"got {value!r}, expected a list of {what}")
    return tuple(str(v).strip() for v in value if str(v).strip())


def _emails(value: Any) -> tuple[str, ...]:
    return _listed(value, "e-mail addresses")


class ConfigError(ValueError):
    """The stack config is wrong; `problems` holds one line per mistake."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the stack config:\n{lines}")


@dataclass(frozen=True)
class StackKey:
    """Where a StackConfig field comes from: its key in the stack file
    (`glucose-training:<name>`, a public contract) and how its value is read."""

    name: str
    parse: Callable[[Any], Any] = _text
    """Text (or a native value) to the field's value; ValueError names what was expected."""
    secret: bool = False
    """A credential (whoever has the webhook URL may post to the channel): set with
    `pulumi config set --secret`, kept secret through the user data to the outputs."""
    cloud: str | None = None
    """The one cloud it means something on: set on the other, it is a mistake."""
    limits: tuple[int, int] | None = None
    """The lowest and highest whole number it takes."""
    guard: GuardSetting | None = None
    """The box's guard setting it sets (`box.watchdog_config.GUARD_SETTINGS`)."""


_KEY = "stack_key"


def _key(name: str, parse: Callable[[Any], Any] = _text, *, default: Any = MISSING, **more) -> Any:
    """A StackConfig field read from the stack file's key `name` by `parse`."""
    return field(default=default, metadata={_KEY: StackKey(name, parse, **more)})


def _guard(box_key: str, parse: Callable[[Any], Any]) -> Any:
    """A field that sets the box's guard setting `box_key`: its stack key, default and
    limits are the setting's own (`box.watchdog_config.GUARD_SETTINGS`)."""
    setting = next(s for s in GUARD_SETTINGS if s.box_key == box_key)
    return _key(setting.stack_key, parse, default=setting.default, guard=setting)


def _sizes(value: Any) -> tuple[str, ...]:
    return _listed(value, "VM sizes")


def _zones(value: Any) -> tuple[str, ...]:
    return _listed(value, "zones")


@dataclass(frozen=True, kw_only=True)
class StackConfig:
    """One stack's validated settings; constructing one with bad values raises ConfigError.

    Each field read from the stack file names its key and parser (`StackKey`); the
    fields stand in the order their problems are told."""

    cloud: str = _key("cloud")
    vm_size: str = _key("vmSize")
    spot: bool = _key("spot", _boolean, default=False)
    node_count: int = _key("nodeCount", _integer, default=1, limits=(1, MAX_NODE_COUNT))
    ssh_public_key: str = _key("sshPublicKey")
    ssh_allowed_cidr: str = _key("sshAllowedCidr")
    allow_ssh_from_anywhere: bool = _key("allowSshFromAnywhere", _boolean, default=False)
    auto_shutdown_time: str = _guard("daily_stop_time", _text)
    """HH:MM, 24 h, in auto_shutdown_time_zone: the cloud-side daily hard stop."""
    auto_shutdown_time_zone: str = _guard("daily_stop_time_zone", _text)
    """An IANA zone name."""
    idle_shutdown_minutes: int = _guard("idle_shutdown_minutes", _integer)
    hung_trainer_minutes: int = _guard("hung_trainer_minutes", _integer)
    peer_wait_minutes: int = _guard("peer_wait_minutes", _integer)
    """How long a box of a multi-node run tries to meet its other boxes in a boot."""
    budget_amount: float = _key("budgetAmount", _amount)
    alert_emails: tuple[str, ...] = _key("alertEmails", _emails)
    keep_storage_on_destroy: bool = _key("keepStorageOnDestroy", _boolean, default=False)
    # CUDA images are ~10 GB each; datasets are cached too.
    os_disk_size_gb: int = _key("osDiskSizeGb", _integer, default=128, limits=OS_DISK_SIZE_GB_RANGE)
    owner: str | None = _key("owner", default=None)
    ami_id: str | None = _key("amiId", default=None, cloud="aws")
    """AWS: the image the boxes boot; unset, the newest matching AMI is looked up once."""
    budget_stops_boxes: bool = _key("budgetStopsBoxes", _boolean, default=True)
    """At 100 % of the actual monthly budget, stop (AWS) / deallocate (Azure) the boxes."""
    activate_cost_allocation_tag: bool = _key(
        "activateCostAllocationTag", _boolean, default=True, cloud="aws"
    )
    """AWS: activate the budget's tag for cost allocation (needs the payer account)."""
    deployer_principal_type: str | None = _key("deployerPrincipalType", default=None, cloud="azure")
    """Azure: who runs `pulumi up` (User or ServicePrincipal); unset, detected."""
    max_run_hours: int = _key("maxRunHours", _integer, default=72, limits=MAX_RUN_HOURS_RANGE)
    """The longest `fab train --hours` may move a run's cloud-side hard stop."""
    auto_recover: bool | None = _key("autoRecover", _boolean, default=None)
    """Bring back a run stopped by what it did not ask for (a spot eviction, a host
    failure) until its deadline; unset: on for spot boxes, off otherwise."""
    notify_webhook: str | None = _key("notifyWebhook", default=None, secret=True)
    """An https URL told each run's end as Slack/Teams JSON (box/notify.py)."""
    fallback_vm_sizes: tuple[str, ...] = _key("fallbackVmSizes", _sizes, default=())
    """Sizes tried in order after `vm_size` when it has no capacity or quota (same GPU
    count, driver class and security profile: stack/cloud_limits.py)."""
    zones: tuple[str, ...] = _key("zones", _zones, default=())
    """Zones tried in order (AWS names, Azure "1"/"2"/"3"); () every zone selling a size."""
    # Azure's VM takes one priority: a spot VM cannot fall back to regular in place.
    spot_fallback: bool = _key("spotFallback", _boolean, default=False, cloud="aws")
    """AWS spot: after every spot pool, on-demand."""
    capacity_wait_minutes: int = _key("capacityWaitMinutes", _integer, default=5)
    """How long `fab start` retries the same size before it resizes the box in place."""
    region: str
    """The provider's region (`aws:region`, `azure-native:location`: REGION_KEYS)."""
    project: str = NAMESPACE
    stack: str = "dev"

    def __post_init__(self) -> None:
        problems = _check(asdict(self))
        if problems:
            raise ConfigError(problems)

    @property
    def size(self) -> catalog.VmSize:
        return catalog.lookup(self.vm_size, self.cloud)

    @property
    def candidate_sizes(self) -> tuple[str, ...]:
        """`vm_size`, then `fallback_vm_sizes`: the order every size is tried in."""
        return (self.vm_size, *self.fallback_vm_sizes)

    @property
    def hourly_price_usd(self) -> float:
        """One box's hourly price from the catalog, spot-aware."""
        return self.size.hourly_price_usd(self.spot)

    @property
    def recovers(self) -> bool:
        """Whether evicted boxes are started again (`autoRecover`, on for spot by default)."""
        return self.spot if self.auto_recover is None else self.auto_recover

    @property
    def cost_scope(self) -> str:
        """The `cost-scope` tag value: this stack of this project, unique in an account."""
        return f"{self.project}/{self.stack}"

    @property
    def tags(self) -> dict[str, str]:
        tags = {"project": self.project, "stack": self.stack, COST_SCOPE_TAG: self.cost_scope}
        if self.owner:
            tags["owner"] = self.owner
        return tags

    @property
    def storage_tags(self) -> dict[str, str]:
        """`tags` plus whether `pulumi destroy` keeps the storage ("true"/"false")."""
        return {**self.tags, KEEP_ON_DESTROY_TAG: str(self.keep_storage_on_destroy).lower()}


FIELDS_BY_KEY: dict[str, Field] = {
    field.metadata[_KEY].name: field for field in fields(StackConfig) if _KEY in field.metadata
}
"""Each stack-file key and the StackConfig field it sets, in the fields' order."""
SECRET_KEYS = tuple(key for key, field in FIELDS_BY_KEY.items() if field.metadata[_KEY].secret)
_GUARDS = {
    setting: field.name
    for field in FIELDS_BY_KEY.values()
    if (setting := field.metadata[_KEY].guard) is not None
}
GUARD_FIELDS = {setting.box_key: _GUARDS[setting] for setting in GUARD_SETTINGS}
"""Each guard setting's watchdog.json key and the StackConfig field that sets it."""


def validate(
    raw: dict[str, Any], region: str | None, *, project: str = NAMESPACE, stack: str = "dev"
) -> StackConfig:
    """Parse camelCase config values (strings as Pulumi stores them, or native values)."""
    problems = [_unknown_key_problem(key) for key in raw if key not in FIELDS_BY_KEY]
    problems += _cloud_only_problems(raw)
    values: dict[str, Any] = {"project": project, "stack": stack, "region": region}
    for key, config_field in FIELDS_BY_KEY.items():
        value = raw.get(key)
        if value is None or value == "":
            continue
        try:
            values[config_field.name] = config_field.metadata[_KEY].parse(value)
        except ValueError as exc:
            problems.append(f"{key}: {exc}")
            values[config_field.name] = None  # seen but unusable: no "missing" complaint on top
    values.setdefault("cloud", None)
    problems += _check(values)
    if problems:
        raise ConfigError(problems)
    if "vm_size" not in values:
        values["vm_size"] = catalog.default_size(values["cloud"]).name
    values["vm_size"] = catalog.lookup(values["vm_size"], values["cloud"]).name  # canonical
    values["fallback_vm_sizes"] = tuple(
        catalog.lookup(name, values["cloud"]).name for name in values.get("fallback_vm_sizes", ())
    )
    values["ssh_allowed_cidr"] = _normal_cidr(values["ssh_allowed_cidr"])
    return StackConfig(**values)


def _unknown_key_problem(key: str) -> str:
    known = list(FIELDS_BY_KEY)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {NAMESPACE}:{close[0]}?" if close else f"known keys: {', '.join(known)}"
    return f"unknown key {NAMESPACE}:{key}; {hint}"


def _check(v: dict[str, Any]) -> list[str]:
    """Every problem with parsed values; a None value was already reported by its parser."""
    problems = _cloud_problems(v) + _ssh_problems(v) + _budget_problems(v)
    problems += _schedule_problems(v) + _size_problems(v) + _identity_problems(v)
    problems += placeholder_problems(v) + _notify_problems(v)
    problems += cloud_limits.placement_problems(v)
    return problems


def _notify_problems(v: dict[str, Any]) -> list[str]:
    url = v.get("notify_webhook")
    if url is None or webhook_ok(url):
        return []
    return [
        f"notifyWebhook: got {webhook_shown(url)!r}, expected an https URL such as a Slack or "
        "Teams incoming webhook (https://hooks.slack.com/services/...)"
    ]


def webhook_shown(url: str) -> str:
    """What a message may say of a webhook URL: its scheme and host, never its path (the
    secret)."""
    host = webhook_host(url)
    return f"{url.partition(':')[0]}://{host}/..." if host else "(not a URL)"


def webhook_host(url: str) -> str:
    """The host of a webhook URL; "" when it has none or cannot be parsed."""
    try:
        return urllib.parse.urlsplit(url).hostname or ""
    except ValueError:  # an unclosed [IPv6 or a bad port
        return ""


def webhook_ok(url: str, *, http_to_this_machine: bool = False) -> bool:
    """An https URL with a host and no whitespace (what Slack and Teams hand out); with
    `http_to_this_machine`, http to a loopback host too (a target file's own relay)."""
    host = webhook_host(url)
    if not host or any(character.isspace() for character in url):
        return False
    if url.startswith("https://"):
        return True
    return http_to_this_machine and url.startswith("http://") and _loopback(host)


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cloud_only_problems(raw: dict[str, Any]) -> list[str]:
    cloud = raw.get("cloud")
    return [
        f"{key} applies to cloud {only} only; remove it from this {cloud} stack"
        for key, field in FIELDS_BY_KEY.items()
        if (only := field.metadata[_KEY].cloud)
        and cloud in catalog.CLOUDS
        and cloud != only
        and raw.get(key) not in (None, "")
    ]


def _identity_problems(v: dict[str, Any]) -> list[str]:
    problems = []
    ami = v.get("ami_id")
    if ami is not None and not _AMI_ID.match(ami):
        problems.append(f"amiId: got {ami!r}, expected an AMI id such as ami-0abc1234def567890")
    kind = v.get("deployer_principal_type")
    if kind is not None and kind not in PRINCIPAL_TYPES:
        problems.append(
            f"deployerPrincipalType: got {kind!r}, expected one of {', '.join(PRINCIPAL_TYPES)} "
            "(or leave it unset: it is detected from the deployer's token)"
        )
    return problems


def _missing(key: str, example: str, v: dict[str, Any]) -> str | None:
    if FIELDS_BY_KEY[key].name in v:
        return None
    return f"{key} is missing; set it with `pulumi config set {NAMESPACE}:{key} {example}`"


def _cloud_problems(v: dict[str, Any]) -> list[str]:
    cloud = v.get("cloud")
    if cloud is None:
        return [f"cloud is missing or empty; expected one of {', '.join(catalog.CLOUDS)}"]
    if cloud not in catalog.CLOUDS:
        return [f"cloud: got {cloud!r}, expected one of {', '.join(catalog.CLOUDS)}"]
    if not v.get("region"):
        return [
            f"no region for {cloud}; set it with `pulumi config set {REGION_KEYS[cloud]} "
            f"{catalog.default_size(cloud).price_region}`"
        ]
    return []


def _size_problems(v: dict[str, Any]) -> list[str]:
    cloud = v.get("cloud")
    if cloud not in catalog.CLOUDS or v.get("vm_size", "") is None:
        return []
    name = v.get("vm_size") or catalog.default_size(cloud).name
    return cloud_limits.size_problems(cloud, v.get("region"), name, bool(v.get("spot")))


def _ssh_problems(v: dict[str, Any]) -> list[str]:
    wanted = (
        _missing("sshPublicKey", YOUR_KEY, v),
        _missing("sshAllowedCidr", YOUR_CIDR, v),
    )
    problems = [p for p in wanted if p]
    key = v.get("ssh_public_key")
    if key is not None and "ssh_public_key" in v:
        parts = key.split()
        if "PRIVATE KEY" in key:
            problems.append("sshPublicKey holds a PRIVATE key; paste the .pub file instead")
        elif len(parts) < 2 or parts[0] not in SSH_KEY_TYPES or not _is_base64(parts[1]):
            problems.append(
                f"sshPublicKey: got {key[:24]!r}..., expected an OpenSSH public key starting "
                f"with {' or '.join(SSH_KEY_TYPES)} (contents of ~/.ssh/id_ed25519.pub)"
            )
    cidr = v.get("ssh_allowed_cidr")
    if cidr is not None and "ssh_allowed_cidr" in v:
        problems += _cidr_problems(cidr, bool(v.get("allow_ssh_from_anywhere")))
    return problems


def _cidr_problems(cidr: str, allow_anywhere: bool) -> list[str]:
    insist = f"or set {NAMESPACE}:allowSshFromAnywhere true to insist"
    if cidr.lower() in ANYWHERE_CIDRS or cidr.endswith("/0"):
        if allow_anywhere:
            return []
        return [
            f"sshAllowedCidr {cidr!r} opens SSH to the whole internet; use your own address "
            f"(e.g. 203.0.113.7/32), {insist}"
        ]
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return [f"sshAllowedCidr: got {cidr!r}, expected an IPv4 CIDR such as 203.0.113.7/32"]
    if network.version != 4:
        return [f"sshAllowedCidr: got {cidr!r}, expected IPv4 (the boxes have IPv4 addresses)"]
    if network.prefixlen < NARROWEST_BROAD_PREFIX and not allow_anywhere:
        return [
            f"sshAllowedCidr {cidr!r} opens SSH to {network.num_addresses:,} addresses "
            f"(1/{2**network.prefixlen} of the internet); expected /{NARROWEST_BROAD_PREFIX} "
            f"or narrower, e.g. your own address 203.0.113.7/32, {insist}"
        ]
    return []


def _normal_cidr(cidr: str) -> str:
    if cidr.lower() in ANYWHERE_CIDRS or cidr.endswith("/0"):
        return "0.0.0.0/0"
    return str(ipaddress.ip_network(cidr, strict=False))


def _is_base64(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", text) is not None and len(text) >= 16


def _budget_problems(v: dict[str, Any]) -> list[str]:
    wanted = (_missing("budgetAmount", "200", v), _missing("alertEmails", YOUR_EMAIL, v))
    problems = [p for p in wanted if p]
    amount = v.get("budget_amount")
    if amount is not None and not (math.isfinite(amount) and amount > 0):
        problems.append(f"budgetAmount: got {amount}, expected a positive USD amount such as 200")
    emails = v.get("alert_emails")
    if emails is not None and "alert_emails" in v:
        bad = [e for e in emails if not _EMAIL.match(e)]
        if not emails:
            problems.append("alertEmails is empty; budget and shutdown alerts need a recipient")
        if bad:
            problems.append(f"alertEmails: {bad} are not e-mail addresses")
        problems += cloud_limits.alert_email_problems(v.get("cloud"), emails)
    owner = v.get("owner")
    if owner is not None and not _OWNER_TAG.match(owner):
        problems.append(f"owner: got {owner!r}, expected a tag value (letters, digits, .@+- )")
    return problems


def _schedule_problems(v: dict[str, Any]) -> list[str]:
    problems = []
    time = v.get("auto_shutdown_time")
    if time is not None and not DAILY_TIME.fullmatch(time):
        problems.append(f"autoShutdownTime: got {time!r}, expected HH:MM on a 24 h clock")
    zone = v.get("auto_shutdown_time_zone")
    if zone is not None:
        problems += cloud_limits.time_zone_problems(zone, v.get("cloud"))
    problems += guard_problems({box_key: v.get(name) for box_key, name in GUARD_FIELDS.items()})
    for key, config_field in FIELDS_BY_KEY.items():
        value, limits = v.get(config_field.name), config_field.metadata[_KEY].limits
        if value is not None and limits and not limits[0] <= value <= limits[1]:
            problems.append(f"{key}: got {value}, expected {limits[0]} to {limits[1]}")
    if v.get("cloud") == "aws" and v.get("spot") and v.get("auto_recover") is False:
        problems.append(
            "autoRecover: false cannot hold on an AWS spot stack: the box's persistent spot "
            "request (what lets it stop, not terminate, when interrupted) has EC2 start it "
            "again by itself; remove autoRecover, or set spot: false"
        )
    return problems


# --- values the example stack files hold for you to change ---------------------------
# Pulumi.*-example.yaml marks them CHANGE; kept, each breaks the stack without a word:
# a documentation address (RFC 5737) as sshAllowedCidr shuts you out of the box, an
# example domain (RFC 2606, RFC 6761) never gets the budget's alerts, and the
# placeholder key matches no private key of yours.
DOCUMENTATION_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)
EXAMPLE_DOMAINS = ("example.com", "example.net", "example.org")
RESERVED_TOP_LEVEL_DOMAINS = ("example", "test", "invalid", "localhost")
PLACEHOLDER_KEY_MARK = "ChangeMe"
# The fixes, as shell lines that fill in your own values.
YOUR_KEY = '"$(cat ~/.ssh/id_ed25519.pub)"'
YOUR_CIDR = '"$(curl -s https://checkip.amazonaws.com)/32"'
YOUR_EMAIL = '"$(git config user.email)"'


def placeholder_problems(v: dict[str, Any]) -> list[str]:
    """The example stack's placeholders still in the parsed values `v`, each with the
    command that sets your own value."""
    problems = []
    key = v.get("ssh_public_key")
    if isinstance(key, str) and PLACEHOLDER_KEY_MARK in key:
        problems.append(
            f"sshPublicKey is the example's placeholder ({PLACEHOLDER_KEY_MARK}...); set "
            f"yours: `pulumi config set {NAMESPACE}:sshPublicKey {YOUR_KEY}`"
        )
    cidr = v.get("ssh_allowed_cidr")
    if isinstance(cidr, str) and _is_documentation_network(cidr):
        problems.append(
            f"sshAllowedCidr {cidr!r} is a documentation address (RFC 5737), no one's: "
            "SSH from your machine would be refused; set your public address: "
            f"`pulumi config set {NAMESPACE}:sshAllowedCidr {YOUR_CIDR}`"
        )
    if examples := [email for email in v.get("alert_emails") or () if _is_example_address(email)]:
        problems.append(
            f"alertEmails {', '.join(examples)}: example domains (RFC 2606) that no mail "
            "reaches, so budget and shutdown alerts would go nowhere; set yours: "
            f"`pulumi config set {NAMESPACE}:alertEmails {YOUR_EMAIL}`"
        )
    return problems


def _is_documentation_network(cidr: str) -> bool:
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False  # _cidr_problems names it
    return any(
        network.version == doc.version and network.subnet_of(doc) for doc in DOCUMENTATION_NETWORKS
    )


def _is_example_address(email: str) -> bool:
    domain = email.rpartition("@")[2].lower().rstrip(".")
    return (
        any(domain == d or domain.endswith(f".{d}") for d in EXAMPLE_DOMAINS)
        or domain.rpartition(".")[2] in RESERVED_TOP_LEVEL_DOMAINS
    )
