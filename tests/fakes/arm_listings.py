"""A fake of ARM's read-only listings `fab leaks` makes, on 127.0.0.1 (not a plugin).

Apart from tests/fakes/arm.py (power, quotas, tags): this one answers the lists of
Microsoft.Resources (subscriptions, resource groups and resources, filtered by tag as
`$filter=tagName eq 'k' and tagValue eq 'v'` asks, a group's resources) a page of
PAGE_SIZE at a time with a `nextLink` as ARM pages, and a VM with its instance view
(`$expand=instanceView`). State is plain data a test edits; every request is recorded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

from tests.fakes.local_http import LocalHttpServer, reply

SUBSCRIPTION = "00000000-0000-0000-0000-00000000sub1"
PAGE_SIZE = 2  # small: every listing of a few things is paged
_TAG_FILTER = re.compile(r"tagName eq '([^']*)' and tagValue eq '([^']*)'")


@dataclass
class Vm:
    size: str = "Standard_NC24ads_A100_v4"
    power: str = "PowerState/running"
    priority: str = "Regular"


@dataclass
class ListingState:
    subscriptions: list[str] = field(default_factory=lambda: [SUBSCRIPTION])
    groups: list[dict[str, Any]] = field(default_factory=list)
    """Resource groups as ARM lists them: `id`, `name`, `tags`."""
    resources: list[dict[str, Any]] = field(default_factory=list)
    """Resources as ARM lists them: `id`, `name`, `type`, `tags`, `sku`, `managedBy`."""
    vms: dict[str, Vm] = field(default_factory=dict)
    """VM id -> what reading it answers."""
    next_link_base: str = ""
    """Where `nextLink`s point ("": this fake)."""
    redirect_to: str = ""
    """When set, every answer is a 302 to it."""
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(path and query, bearer token) of every request."""


class FakeArmListings(LocalHttpServer):
    def __init__(self, state: ListingState | None = None) -> None:
        self.state = state or ListingState()
        super().__init__(_handler(self))

    def group(self, name: str, tags: dict[str, str] | None = None) -> str:
        group_id = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{name}"
        self.state.groups.append({"id": group_id, "name": name, "tags": tags or {}})
        return group_id

    def resource(self, group_id: str, kind: str, name: str, **more: Any) -> str:
        resource_id = f"{group_id}/providers/{kind}/{name}"
        self.state.resources.append({"id": resource_id, "name": name, "type": kind, **more})
        return resource_id

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        state = self.state
        if path == "/subscriptions":
            return 200, self._page(path, query, [
                {"subscriptionId": s, "state": "Enabled"} for s in state.subscriptions
            ])  # fmt: skip
        if path in state.vms:
            return self._vm(path, query)
        tagged = _TAG_FILTER.fullmatch(query.get("$filter", [""])[0])
        wanted = (lambda item: item.get("tags", {}).get(tagged[1]) == tagged[2]) if tagged else None
        match = re.fullmatch(r"/subscriptions/([^/]+)/(resourcegroups|resources)", path)
        if match and match[1] in state.subscriptions:
            items = state.groups if match[2] == "resourcegroups" else state.resources
            return 200, self._page(path, query, [i for i in items if wanted is None or wanted(i)])
        if group := re.fullmatch(r"(/subscriptions/[^/]+/resourceGroups/[^/]+)/resources", path):
            if not any(g["id"] == group[1] for g in state.groups):
                return 404, {"error": {"code": "ResourceGroupNotFound", "message": group[1]}}
            inside = [r for r in state.resources if r["id"].startswith(group[1] + "/")]
            return 200, self._page(path, query, inside)
        return 404, {"error": {"code": "NotFound", "message": path}}

    def _vm(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        vm = self.state.vms[path]
        properties: dict[str, Any] = {
            "hardwareProfile": {"vmSize": vm.size},
            "priority": vm.priority,
        }
        if query.get("$expand") == ["instanceView"]:
            codes = ["ProvisioningState/succeeded", vm.power]
            properties["instanceView"] = {"statuses": [{"code": code} for code in codes]}
        return 200, {"id": path, "properties": properties}

    def _page(self, path: str, query: dict[str, list[str]], items: list[Any]) -> dict[str, Any]:
        start = int(query.get("$skiptoken", ["0"])[0])
        page: dict[str, Any] = {"value": items[start : start + PAGE_SIZE]}
        if start + PAGE_SIZE < len(items):
            rest = {k: v[0] for k, v in query.items()} | {"$skiptoken": str(start + PAGE_SIZE)}
            page["nextLink"] = (
                f"{self.state.next_link_base or self.endpoint}{path}?{urlencode(rest)}"
            )
        return page


def _handler(arm: FakeArmListings) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            arm.state.requests.append((self.path, token))
            if arm.state.redirect_to:
                reply(self, 302, b"", "text/plain", {"Location": arm.state.redirect_to})
                return
            status, body = arm.answer(url.path, parse_qs(url.query))
            reply(self, status, json.dumps(body).encode(), "application/json")

        def log_message(self, *args) -> None:
            pass

    return Handler
