"""Small HTTP calls to the instance metadata services and to Azure Resource Manager.

Both clouds serve metadata at the same link-local address (config `imds_url`);
the tests point it at a fake on 127.0.0.1. Each request is bounded as a whole,
its answer's body included (box/bounded_post.call): `http_timeout_seconds`, or less
where the caller's `give_up_at` (time.monotonic()) comes first; an answer that did
not come whole in that time is a MetadataError, never a success. Standard library only.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

from box import bounded_post
from box.watchdog_config import ARM_TAGS_API_VERSION, ARM_TAGS_PATH, WatchdogConfig

AZURE_IMDS_API_VERSION = "2021-02-01"
AZURE_EVENTS_API_VERSION = "2020-07-01"
AZURE_TOKEN_API_VERSION = "2018-02-01"
AWS_TOKEN_TTL_SECONDS = 300
AZURE_STORAGE_RESOURCE = "https://storage.azure.com/"
"""The audience of a managed-identity token for Blob storage's data plane."""
MAX_ANSWER_BYTES = 1024 * 1024
"""Of one metadata or ARM answer: far above any the box reads (a credentials document,
the instance's metadata), far below what would strain the box."""


class MetadataError(RuntimeError):
    """A metadata or ARM call failed; the message says which and why."""


def request(
    url: str,
    *,
    timeout_seconds: float,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    """(status, body) of the whole answer within `timeout_seconds`, all of the request
    together; raises MetadataError when no whole answer came in that time."""
    reply = bounded_post.call(
        method,
        url,
        body,
        headers or {},
        within_seconds=timeout_seconds,
        answer_bytes=MAX_ANSWER_BYTES,
    )
    if reply.status is None or not reply.whole:
        raise MetadataError(f"{method} {url}: no answer ({reply.problem})")
    return reply.status, reply.body


def seconds_for(config: WatchdogConfig, give_up_at: float | None) -> float:
    """One request's time: the config's, cut to what is left before `give_up_at`."""
    if give_up_at is None:
        return config.request_timeout_seconds
    return min(config.request_timeout_seconds, give_up_at - time.monotonic())


def _json_ok(url: str, status: int, body: bytes) -> Any:
    if status != 200:
        raise MetadataError(f"GET {url}: HTTP {status}: {body[:300]!r}")
    try:
        return json.loads(body)
    except ValueError as error:
        raise MetadataError(f"GET {url}: not JSON: {body[:300]!r}") from error


def azure_arm_token(config: WatchdogConfig) -> str:
    """A token for ARM from the VM's managed identity."""
    return azure_token(config, config.arm_resource)


def azure_token(config: WatchdogConfig, resource: str, give_up_at: float | None = None) -> str:
    """A token for `resource` (ARM's, AZURE_STORAGE_RESOURCE) from the VM's managed
    identity, by `give_up_at` if given.

    https://learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token
    """
    query = {"api-version": AZURE_TOKEN_API_VERSION, "resource": resource}
    if config.identity_client_id:
        query["client_id"] = config.identity_client_id
    url = f"{config.imds_url}/metadata/identity/oauth2/token?{urllib.parse.urlencode(query)}"
    status, body = request(
        url, timeout_seconds=seconds_for(config, give_up_at), headers={"Metadata": "true"}
    )
    token = _json_ok(url, status, body).get("access_token")
    if not token:
        raise MetadataError(f"GET {url}: no access_token in the answer")
    return token


def azure_vm_resource_id(config: WatchdogConfig) -> str:
    """/subscriptions/.../virtualMachines/<name> of this VM, from instance metadata."""
    compute = _azure_compute(config)
    if compute.get("resourceId"):
        return compute["resourceId"]
    try:
        return (
            f"/subscriptions/{compute['subscriptionId']}/resourceGroups/"
            f"{compute['resourceGroupName']}/providers/Microsoft.Compute/virtualMachines/"
            f"{compute['name']}"
        )
    except KeyError as error:
        raise MetadataError(f"instance metadata: compute.{error.args[0]} missing") from error


def azure_delete_tag(config: WatchdogConfig, resource_id: str, token: str, name: str) -> bool:
    """Delete tag `name` of a resource through ARM's tags endpoint; False when it had none.

    The delete names the tag with the value it holds, read just before: ARM deletes
    "based on given names or name/value pairs", and a stale value must not leave the
    tag in place.
    https://learn.microsoft.com/rest/api/resources/tags/update-at-scope
    """
    url = f"{config.arm_url}{resource_id}{ARM_TAGS_PATH}?api-version={ARM_TAGS_API_VERSION}"
    auth = {"Authorization": f"Bearer {token}"}
    status, body = request(url, timeout_seconds=config.request_timeout_seconds, headers=auth)
    tags = (_json_ok(url, status, body).get("properties") or {}).get("tags") or {}
    if name not in tags:
        return False
    patch = {"operation": "Delete", "properties": {"tags": {name: tags[name]}}}
    status, body = request(
        url,
        method="PATCH",
        body=json.dumps(patch).encode(),
        timeout_seconds=config.request_timeout_seconds,
        headers={**auth, "Content-Type": "application/json"},
    )
    if status != 200:
        raise MetadataError(f"PATCH {url}: HTTP {status}: {body[:300]!r}")
    return True


def azure_scheduled_events(config: WatchdogConfig) -> list[dict]:
    """This VM's pending Scheduled Events (`EventType` Preempt: a spot eviction)."""
    url = f"{config.imds_url}/metadata/scheduledevents?api-version={AZURE_EVENTS_API_VERSION}"
    status, body = request(
        url, timeout_seconds=config.request_timeout_seconds, headers={"Metadata": "true"}
    )
    events = _json_ok(url, status, body).get("Events")
    if not isinstance(events, list):
        return []
    return [event for event in events if isinstance(event, dict)]


def placement(config: WatchdogConfig) -> dict[str, str]:
    """{"size", "zone", "market"} this box runs on, as its cloud's metadata says; {} on a
    box no cloud made. AWS: instance-type, placement/availability-zone,
    instance-life-cycle; Azure: compute.vmSize, zone, priority (Spot or Regular)."""
    if config.cloud == "aws":
        size, zone, life = aws_metadata(
            config, "instance-type", "placement/availability-zone", "instance-life-cycle"
        )
        return {"size": size, "zone": zone, "market": "spot" if life == "spot" else "on-demand"}
    if config.cloud == "azure":
        compute = _azure_compute(config)
        spot = str(compute.get("priority", "")).lower() in ("spot", "low")
        market = "spot" if spot else "on-demand"
        return {
            "size": compute.get("vmSize", ""),
            "zone": compute.get("zone", ""),
            "market": market,
        }
    return {}


def _azure_compute(config: WatchdogConfig) -> dict:
    url = f"{config.imds_url}/metadata/instance?api-version={AZURE_IMDS_API_VERSION}"
    status, body = request(
        url, timeout_seconds=config.request_timeout_seconds, headers={"Metadata": "true"}
    )
    return _json_ok(url, status, body).get("compute", {})


def aws_metadata(config: WatchdogConfig, *paths: str, give_up_at: float | None = None) -> list[str]:
    """IMDSv2 values, e.g. `instance-id`, `placement/region`, under one session token,
    by `give_up_at` if given."""
    token_url = f"{config.imds_url}/latest/api/token"
    status, token = request(
        token_url,
        method="PUT",
        timeout_seconds=seconds_for(config, give_up_at),
        headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_SECONDS)},
    )
    if status != 200:
        raise MetadataError(f"PUT {token_url}: HTTP {status}")
    values = []
    for path in paths:
        url = f"{config.imds_url}/latest/meta-data/{path}"
        status, body = request(
            url,
            timeout_seconds=seconds_for(config, give_up_at),
            headers={"X-aws-ec2-metadata-token": token.decode()},
        )
        if status != 200:
            raise MetadataError(f"GET {url}: HTTP {status}")
        values.append(body.decode().strip())
    return values


def aws_role_keys(config: WatchdogConfig, give_up_at: float | None = None) -> dict:
    """The instance role's temporary keys (`AccessKeyId`, `SecretAccessKey`, `Token`),
    from IMDSv2, by `give_up_at` if given: what the box signs its own requests with
    (SNS, S3). The document comes whole whatever its size (up to MAX_ANSWER_BYTES)."""
    (listed,) = aws_metadata(config, "iam/security-credentials/", give_up_at=give_up_at)
    if not listed.split():
        raise MetadataError("IMDS: no role attached to the instance")
    path = f"iam/security-credentials/{listed.split()[0]}"
    (keys,) = aws_metadata(config, path, give_up_at=give_up_at)
    try:
        found = json.loads(keys)
    except ValueError as error:
        raise MetadataError(f"GET {path}: not JSON ({error})") from error
    names = ("AccessKeyId", "SecretAccessKey", "Token")
    if not isinstance(found, dict) or not all(isinstance(found.get(name), str) for name in names):
        raise MetadataError(f"GET {path}: expected {', '.join(names)}")
    return found
