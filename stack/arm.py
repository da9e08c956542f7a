"""Azure Resource Manager with a bearer token: what `pulumi up` and `fab preflight` both
ask ARM before anything is declared (quotas; preflight also providers, SKUs, rights and
budgets), and what `fab` changes on a running stack (power, deadline tags, schedules).

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


class ArmError(Exception):
    """ARM answered with an error (or not at all); `status` is 0 when unreachable."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


@dataclass(frozen=True)
class ArmClient:
    """Requests against ARM with a bearer token."""

    token: str
    endpoint: str = ARM_ENDPOINT

    @classmethod
    def from_environment(cls, token: str) -> ArmClient:
        return cls(token, os.environ.get(ARM_ENDPOINT_ENV) or ARM_ENDPOINT)

    def url(self, path: str, api: str, **query: str) -> str:
        """The request URL: `path` on the endpoint, with `api`'s version and `query`."""
        params = urllib.parse.urlencode({"api-version": API_VERSIONS[api], **query})
        return f"{self.endpoint.rstrip('/')}{path}?{params}"

    def get(self, path: str, api: str, **query: str) -> Any:
        return self._call("GET", path, api, query)

    def post(self, path: str, api: str, **query: str) -> Any:
        """An action (`.../start`): ARM answers 200 or 202 Accepted, often with no body."""
        return self._call("POST", path, api, query)

    def patch(self, path: str, api: str, body: dict[str, Any]) -> Any:
        """Change part of a resource: only what `body` names."""
        return self._call("PATCH", path, api, {}, body)

    def put(self, path: str, api: str, body: dict[str, Any]) -> Any:
        """Write a whole resource as `body` says it."""
        return self._call("PUT", path, api, {}, body)

    def _call(
        self, method: str, path: str, api: str, query: dict[str, str], body: Any = None
    ) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = b"" if method == "POST" else None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.url(path, api, **query), method=method, data=data, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
                body = response.read()
                return json.loads(body) if body.strip() else {}
        except urllib.error.HTTPError as error:
            raise ArmError(error.code, _arm_message(error)) from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            raise ArmError(0, f"ARM at {self.endpoint} unreachable: {error}") from None


def _arm_message(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read() or b"{}")
    except json.JSONDecodeError:
        return error.reason
    detail = body.get("error", {})
    return f"{detail.get('code', '')} {detail.get('message', '')}".strip() or str(error.reason)


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
