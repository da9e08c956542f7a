"""Azure Resource Manager with a bearer token: what `pulumi up` and `fab preflight` both
ask ARM before anything is declared (quotas; preflight also providers, SKUs, rights and
budgets), what `fab` reads of a running stack (power, sizes) and the few writes that end
when ARM answers (deadline tags, schedules). A VM's start, deallocation and resize are
long-running operations: `fab` has azure-mgmt-compute's pollers follow them
(ops/cloud/azure.py).

Plain HTTPS through the standard library, so the Pulumi program needs no Azure SDK for
it; whoever calls brings the token (the program's provider, or azure-identity in `fab`).
`GLUCOSE_ARM_ENDPOINT` moves the endpoint (a sovereign cloud, or the tests' fake).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stack import quota

ARM_ENDPOINT_ENV = "GLUCOSE_ARM_ENDPOINT"
ARM_ENDPOINT = "https://management.azure.com"
HTTP_TIMEOUT_SECONDS = 30
# Each one a version the azure-mgmt-* reference packages of the tests build the same
# request with (tests/pulumi/test_cloud_references.py), so a wrong path or version
# fails there, not in a user's `fab preflight`.
API_VERSIONS = {
    "providers": "2021-04-01",
    "skus": "2021-07-01",
    "usages": "2024-11-01",
    "permissions": "2022-04-01",
    "budgets": "2024-08-01",
    "subscriptions": "2022-12-01",
    # What azure-native uses for Microsoft.Compute/virtualMachines.
    "virtual_machines": "2024-11-01",
    # Microsoft.Resources/tags (a resource's tags alone, without writing the resource).
    "tags": "2021-04-01",
    # Microsoft.DevTestLab/schedules: the VMs' daily stop, as azure-native declares it.
    "schedules": "2018-09-15",
}


def arm_endpoint() -> str:
    """ARM's endpoint: `GLUCOSE_ARM_ENDPOINT`, else Azure's public cloud."""
    return os.environ.get(ARM_ENDPOINT_ENV) or ARM_ENDPOINT


class ArmError(Exception):
    """ARM answered with an error (or not at all); `status` is 0 when unreachable, `code`
    ARM's error code ("AllocationFailed") when it gave one."""

    def __init__(self, status: int, message: str, code: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class ArmClient:
    """Requests against ARM with a bearer token."""

    token: str
    endpoint: str = ARM_ENDPOINT

    @classmethod
    def from_environment(cls, token: str) -> ArmClient:
        return cls(token, arm_endpoint())

    def url(self, path: str, api: str, **query: str) -> str:
        """The request URL: `path` on the endpoint, with `api`'s version and `query`."""
        params = urllib.parse.urlencode({"api-version": API_VERSIONS[api], **query})
        return f"{self.endpoint.rstrip('/')}{path}?{params}"

    def get(self, path: str, api: str, **query: str) -> Any:
        return self._call("GET", path, api, query)

    def patch(self, path: str, api: str, body: dict[str, Any]) -> Any:
        """Change part of a resource: only what `body` names."""
        return self._call("PATCH", path, api, {}, body)

    def put(self, path: str, api: str, body: dict[str, Any]) -> Any:
        """Write a whole resource as `body` says it."""
        return self._call("PUT", path, api, {}, body)

    def _call(
        self, method: str, path: str, api: str, query: dict[str, str], body: Any = None
    ) -> Any:
        return self._send(method, self.url(path, api, **query), body)

    def _send(self, method: str, url: str, body: Any = None) -> Any:
        """The JSON body of one request's answer; ArmError for an HTTP error."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, method=method, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
                text = response.read()
                return json.loads(text) if text.strip() else {}
        except urllib.error.HTTPError as error:
            code, message = _arm_error(error)
            text = f"{code} {message}".strip() or str(error.reason)
            raise ArmError(error.code, text, code) from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            raise ArmError(0, f"ARM at {self.endpoint} unreachable: {error}") from None


def _arm_error(error: urllib.error.HTTPError) -> tuple[str, str]:
    """(code, message) of ARM's error body; ("", "") when it has none."""
    try:
        body = json.loads(error.read() or b"{}")
    except json.JSONDecodeError:
        return "", ""
    detail = body.get("error", {}) if isinstance(body, dict) else {}
    return str(detail.get("code", "")), str(detail.get("message", ""))


def quota_problems(
    arm: ArmClient, subscription: str, config: Any, *, in_use: bool = True, family: str = ""
) -> list[str]:
    """Shortfalls of the Spot pool, or of the size's family and the regional total.

    `in_use=False` ignores what already runs (the Pulumi program's check, where that
    is this stack's own boxes); `family` is the SKU API's name for the size's family.
    """
    path = f"/subscriptions/{subscription}/providers/Microsoft.Compute/locations/"
    usages = {
        u["name"]["value"].lower(): u
        for u in arm.get(f"{path}{config.region}/usages", "usages").get("value", [])
    }
    need = quota.vcpus_needed(config.size, config.node_count)
    lines = []
    for wanted in quota.azure_gpu_quotas(config.size, config.spot, config.region, family):
        usage = usages.get(wanted.name.lower(), {"limit": 0, "currentValue": 0})
        used = usage["currentValue"] if in_use else 0
        line = quota.shortfall(wanted, usage["limit"], used, need)
        if line:
            lines.append(line)
    return lines


def sku_zones(sku: Mapping[str, Any] | None, wanted: Sequence[str] = ()) -> tuple[str, ...]:
    """The zones of a Resource SKUs entry the subscription may use it in: in `wanted`'s
    order (those of `wanted` only), else by name."""
    if not sku:
        return ()
    info = next(iter(sku.get("locationInfo") or []), {})
    restricted = {
        zone
        for restriction in sku.get("restrictions") or []
        if restriction.get("type") == "Zone"
        for zone in (restriction.get("restrictionInfo") or {}).get("zones") or []
    }
    sold = [zone for zone in info.get("zones") or [] if zone not in restricted]
    return tuple(zone for zone in (list(wanted) or sorted(sold)) if zone in sold)


def sku_refusal(sku: Mapping[str, Any] | None, region: str, wanted: Sequence[str] = ()) -> str:
    """Why the subscription cannot have this size in `region` (in the `wanted` zones), in
    ARM's words ("SkuNotAvailable: ..."), or "" when it can."""
    if not sku:
        return f"SkuNotAvailable: not offered in {region}"
    for restriction in sku.get("restrictions") or []:
        if restriction.get("type") == "Location":
            return f"SkuNotAvailable: {restriction.get('reasonCode')} in {region}"
    if wanted and not sku_zones(sku, wanted):
        return f"SkuNotAvailable: not sold in zones {', '.join(wanted)}"
    return ""
