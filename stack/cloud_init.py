"""The cloud-init document both clouds boot a box with: small, because EC2 takes 16 KB.

It carries the first-boot files alone: the box's settings (watchdog.json),
box-source.json (where in the stack's storage the programs' archive is and the
sha256 it must have: stack/box_packing.py), bootstrap.py and its unit. runcmd enables the
unit (for later boots) and runs the bootstrap once now: it fetches the archive with
the box's own identity, installs it (box/install.py) and runs setup-box.sh, which turns
the guard on first and writes the `ready` marker last (or `failed`). The programs
themselves never travel in the user data, so the box can grow without meeting the
limit; `render_cloud_init`'s size is checked against USER_DATA_BUDGET_BYTES.

Standard library only and free of pulumi imports, so both Pulumi programs and the
tests call it as a plain function.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from dataclasses import asdict, dataclass

from box import contract
from stack import box_packing, placement
from stack.config import GUARD_FIELDS

SOURCE_PATH = f"{contract.SETTINGS_DIR}/box-source.json"
BOOTSTRAP_PATH = f"{contract.PROGRAM_DIR}/bootstrap.py"
BOOTSTRAP_UNIT = "glucose-bootstrap.service"
USER_DATA_BUDGET_BYTES = 8 * 1024
"""Gzipped: half of EC2's 16,384 bytes, the rest kept for what comes."""
SSH_USER_PATTERN = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
CLOUDS = ("azure", "aws")


@dataclass(frozen=True)
class ProgramsSource:
    """Where a new box fetches its programs: box-source.json, read by bootstrap.py."""

    cloud: str
    ssh_user: str
    storage: str
    """The stack's storageUri: `s3://BUCKET` or `az://ACCOUNT/CONTAINER`."""
    key: str
    """The archive's key in it (stack.storage_layout.box_programs_key)."""
    sha256: str
    region: str
    """AWS: the bucket's region, for the request's signature."""


def render_cloud_init(source: ProgramsSource, settings: str) -> str:
    """The `#cloud-config` YAML text for one box; `settings` is its watchdog.json
    (box_packing.settings_text). Hand the VM `encode_user_data(text)` (AWS
    `user_data_base64`, Azure `osProfile.customData`). ValueError naming every bad
    argument."""
    problems = []
    if source.cloud not in CLOUDS:
        problems.append(f"cloud is {source.cloud!r}, expected one of {', '.join(CLOUDS)}")
    if not SSH_USER_PATTERN.fullmatch(source.ssh_user or ""):
        problems.append(
            f"ssh_user is {source.ssh_user!r}, expected a Linux user name like 'azureuser'"
        )
    if problems:
        raise ValueError("cloud-init: " + "; ".join(problems))
    source_json = json.dumps({**asdict(source), "box_root": contract.BOX_ROOT}, indent=2)
    first_boot = [
        # Root's alone: the settings may hold a secret (the webhook URL).
        (contract.WATCHDOG_CONFIG_PATH, "0600", settings),
        (SOURCE_PATH, "0644", source_json + "\n"),
        (BOOTSTRAP_PATH, "0755", (box_packing.BOX_DIR / "bootstrap.py").read_text()),
        (
            f"{contract.UNIT_DIR}/{BOOTSTRAP_UNIT}",
            "0644",
            (box_packing.BOX_DIR / BOOTSTRAP_UNIT).read_text(),
        ),
    ]
    lines = ["#cloud-config", f"# glucose-training box on {source.cloud}.", "write_files:"]
    for path, mode, content in first_boot:
        lines += _write_file_entry(path, mode, content)
    runcmd = [["systemctl", "enable", BOOTSTRAP_UNIT], ["/usr/bin/python3", BOOTSTRAP_PATH]]
    lines += ["runcmd:", *(f"  - {json.dumps(command)}" for command in runcmd)]
    return "\n".join(lines) + "\n"


def box_notify_settings(config, topic_arn: str = "") -> dict:
    """Where the box tells a run's end (box/notify.py), as watchdog.json keys: the
    StackConfig's notifyWebhook and the stack's SNS topic (AWS), those that are set; and,
    when there are such channels, the stack's first choice ("<vmSize> <market>"), which a
    boot on another size or market is told against (box/boot_record.py)."""
    named = {"notify_webhook": config.notify_webhook or "", "notify_topic_arn": topic_arn}
    told = {key: value for key, value in named.items() if value}
    if told:
        market = placement.SPOT if config.spot else placement.ON_DEMAND
        told["first_choice"] = f"{config.vm_size} {market}"
    return told


def box_storage_settings(cloud: str, storage_uri: str, region: str) -> dict:
    """Where the box stores the end of a run that failed before its trainer stored one
    (box/stored_end.py), as watchdog.json keys: the stack's storageUri, and on AWS the
    bucket's region its requests are signed for."""
    return {"storage_uri": storage_uri, **({"storage_region": region} if cloud == "aws" else {})}


def box_guard_settings(config) -> dict:
    """The guard settings (box keys) of a StackConfig (stack/config.py)."""
    return {box_key: getattr(config, name) for box_key, name in GUARD_FIELDS.items()}


def encode_user_data(cloud_init: str) -> str:
    """base64(gzip(text)): what both clouds take as user data / custom data.

    cloud-init un-gzips user data itself (https://cloudinit.readthedocs.io/en/latest/
    explanation/format.html); mtime=0 keeps the bytes the same from run to run. Neither
    cloud applies a changed document to an existing box (cloud-init runs it once per
    instance; on AWS a new user data would also stop and start the instance, and Azure
    cannot change customData in place), so both programs ignore changes on existing
    boxes and `fab box-update` brings new programs and settings to them. ValueError
    when the packed document is over USER_DATA_BUDGET_BYTES.
    """
    packed = gzip.compress(cloud_init.encode("ascii"), compresslevel=9, mtime=0)
    if len(packed) > USER_DATA_BUDGET_BYTES:
        raise ValueError(
            f"the box's cloud-init is {len(packed)} bytes gzipped, over its "
            f"{USER_DATA_BUDGET_BYTES}-byte budget: slim box/bootstrap.py"
        )
    return base64.b64encode(packed).decode("ascii")


def _write_file_entry(path: str, mode: str, content: str) -> list[str]:
    # A literal block keeps the files readable in the portal / console; it holds any
    # text that is ASCII, ends in exactly one newline and has no leading blank line.
    if not content.isascii() or "\r" in content:
        raise ValueError(f"cloud-init: {path} must be plain ASCII text with Unix newlines")
    if not content.endswith("\n") or content.endswith("\n\n") or content[:1] in (" ", "\n"):
        raise ValueError(f"cloud-init: {path} must end in one newline and start with text")
    body = [f"      {line}" if line else "" for line in content[:-1].split("\n")]
    return [
        f"  - path: {path}",
        "    owner: root:root",
        f"    permissions: '{mode}'",
        "    content: |",
        *body,
    ]
