"""Small HTTP calls to the instance metadata services and to Azure Resource Manager.

Both clouds serve metadata at the same link-local address (config `imds_url`);
the tests point it at a fake on 127.0.0.1. Standard library only.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from box.watchdog_config import ARM_TAGS_API_VERSION, ARM_TAGS_PATH, WatchdogConfig

AZURE_IMDS_API_VERSION = "2021-02-01"
AZURE_EVENTS_API_VERSION = "2020-07-01"
AZURE_TOKEN_API_VERSION = "2018-02-01"
AWS_TOKEN_TTL_SECONDS = 300
AZURE_STORAGE_RESOURCE = "https://storage.azure.com/"
"""The audience of a managed-identity token for Blob storage's data plane."""


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
    """Return (status, body); raises MetadataError when nothing answered."""
    call = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(call, timeout=timeout_seconds) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, OSError) as error:
        raise MetadataError(f"{method} {url}: no answer ({error})") from error


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


def azure_token(config: WatchdogConfig, resource: str) -> str:
    """A token for `resource` (ARM's, AZURE_STORAGE_RESOURCE) from the VM's managed identity.

    https://learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token
    """
    query = {"api-version": AZURE_TOKEN_API_VERSION, "resource": resource}
    if config.identity_client_id:
        query["client_id"] = config.identity_client_id
    url = f"{config.imds_url}/metadata/identity/oauth2/token?{urllib.parse.urlencode(query)}"
    status, body = request(
        url, timeout_seconds=config.request_timeout_seconds, headers={"Metadata": "true"}
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


def aws_metadata(config: WatchdogConfig, *paths: str) -> list[str]:
    """IMDSv2 values, e.g. `instance-id`, `placement/region`, under one session token."""
    token_url = f"{config.imds_url}/latest/api/token"
    status, token = request(
        token_url,
        method="PUT",
        timeout_seconds=config.request_timeout_seconds,
        headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_SECONDS)},
    )
    if status != 200:
        raise MetadataError(f"PUT {token_url}: HTTP {status}")
    values = []
    for path in paths:
        url = f"{config.imds_url}/latest/meta-data/{path}"
        status, body = request(
            url,
            timeout_seconds=config.request_timeout_seconds,
            headers={"X-aws-ec2-metadata-token": token.decode()},
        )
        if status != 200:
            raise MetadataError(f"GET {url}: HTTP {status}")
        values.append(body.decode().strip())
    return values


def aws_role_keys(config: WatchdogConfig) -> dict:
    """The instance role's temporary keys (`AccessKeyId`, `SecretAccessKey`, `Token`),
    from IMDSv2: what the box signs its own requests with (SNS, S3)."""
    roles = "iam/security-credentials/"
    (role,) = aws_metadata(config, roles)
    (keys,) = aws_metadata(config, roles + role.split()[0])
    return json.loads(keys)
