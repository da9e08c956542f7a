"""The ARM calls the project writes by hand, built again by the references' own builders.

Each call is a URL the project sends (method, path, api-version and query); the
reference is the azure-mgmt request builder of that operation. The builder is called
with the values parsed out of our path and must produce the same request: same method,
same path, same query, so the same api-version. A path no builder's template matches,
or a version the builder's package does not send, fails. The Logic Apps' calls are
found by walking their definitions (`workflow_calls`); a call with a body has it
checked against the operation's model too.
"""

from __future__ import annotations

import importlib
import inspect
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from box.watchdog_config import ARM_TAGS_API_VERSION, ARM_TAGS_PATH, WatchdogConfig
from stack.arm import API_VERSIONS, ArmClient
from tests.pulumi.references.azure import SUBSCRIPTION, Model, body_problems

_TEMPLATE = re.compile(r'(?:"template_url",\s*|_url = )"(/[^"]*)"')
RESOURCE_GROUP = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/glucose-rg"
VM_ID = f"{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/glucose-0-vm"


@dataclass(frozen=True)
class Builder:
    """An azure-mgmt request builder: `function` of module `operations`."""

    operations: str
    function: str

    def __call__(self, **arguments: object) -> tuple[str, str]:
        """(method, URL) of the request the builder makes."""
        request = getattr(importlib.import_module(self.operations), self.function)(**arguments)
        return request.method, request.url

    @property
    def template(self) -> str:
        source = inspect.getsource(getattr(importlib.import_module(self.operations), self.function))
        return _TEMPLATE.search(source).group(1)

    def arguments_for(self, path: str) -> dict[str, str] | None:
        """The builder's arguments that make `path`, or None when its template cannot."""
        names = re.findall(r"\{(\w+)\}", self.template)
        pattern = re.escape(self.template)
        for name in names:
            part = f"(?P<{name}>.+)" if name == "scope" else f"(?P<{name}>[^/]+)"
            pattern = pattern.replace(re.escape(f"{{{name}}}"), part, 1)
        match = re.fullmatch(pattern, path)
        if match is None:
            return None
        return {_snake(k): urllib.parse.unquote(v) for k, v in match.groupdict().items()}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def problems(method: str, url: str, builder: Builder, where: str) -> list[str]:
    """Our call against the builder's: one line per difference."""
    ours = urllib.parse.urlsplit(url)
    arguments = builder.arguments_for(ours.path)
    if arguments is None:
        return [f"{where}: {ours.path} is not the form {builder.template} ({builder.function})"]
    query = dict(urllib.parse.parse_qsl(ours.query))
    ours_version = query.pop("api-version", None)
    arguments.update({key.lstrip("$"): value for key, value in query.items()})
    their_method, their_url = builder(**arguments)
    theirs = urllib.parse.urlsplit(their_url)
    their_query = dict(urllib.parse.parse_qsl(theirs.query))
    found = []
    if their_method != method:
        found.append(f"{where}: {method}, the reference sends {their_method}")
    if their_query.pop("api-version") != ours_version:
        found.append(
            f"{where}: api-version {ours_version}, the reference ({builder.operations}) "
            f"builds {builder.function} with {theirs.query}"
        )
    if (theirs.path, their_query) != (ours.path, query):
        found.append(f"{where}: {ours.path}?{query}, the reference builds {their_url}")
    return found


_COMPUTE = "azure.mgmt.compute.operations"
_RESOURCES = "azure.mgmt.resource.resources.v2021_04_01"
_SCHEDULES = "azure.mgmt.devtestlabs.operations._global_schedules_operations"
DEALLOCATE = Builder(f"{_COMPUTE}._virtual_machines_operations", "build_deallocate_request")
START = Builder(f"{_COMPUTE}._virtual_machines_operations", "build_start_request")
VM_GET = Builder(f"{_COMPUTE}._virtual_machines_operations", "build_get_request")
TAGS_GET = Builder(f"{_RESOURCES}.operations._operations", "build_tags_get_at_scope_request")
TAGS_UPDATE = Builder(f"{_RESOURCES}.operations._operations", "build_tags_update_at_scope_request")
SCHEDULE_GET = Builder(_SCHEDULES, "build_get_request")
SCHEDULE_PUT = Builder(_SCHEDULES, "build_create_or_update_request")
VM_UPDATE = Builder(f"{_COMPUTE}._virtual_machines_operations", "build_update_request")
INSTANCE_VIEW = Builder(f"{_COMPUTE}._virtual_machines_operations", "build_instance_view_request")
SKUS = Builder(f"{_COMPUTE}._resource_skus_operations", "build_list_request")

# What the Logic Apps may call: (method, the builder of that request). A call none of
# these builds fails, so a new kind of call comes here with its reference.
WORKFLOW_CALLS = (
    ("POST", DEALLOCATE),
    ("POST", START),
    ("GET", VM_GET),
    ("GET", TAGS_GET),
    ("PATCH", TAGS_UPDATE),
    ("GET", SCHEDULE_GET),
    ("PUT", SCHEDULE_PUT),
)
# The model of each body sent: (models module, class).
BODIES = {
    VM_UPDATE: ("azure.mgmt.compute.models", "VirtualMachineUpdate"),
    TAGS_UPDATE: (f"{_RESOURCES}.models", "TagsPatchResource"),
    SCHEDULE_PUT: ("azure.mgmt.devtestlabs.models", "Schedule"),
}
# The calls of ops/cloud/azure.py (`fab train --hours`, `fab stop`) beside the reads
# above: (method, API_VERSIONS name) -> the builder of that request.
OPS_CALLS = {
    ("GET", "tags"): TAGS_GET,
    ("PATCH", "tags"): TAGS_UPDATE,
    ("GET", "schedules"): SCHEDULE_GET,
    ("PUT", "schedules"): SCHEDULE_PUT,
}
ARM = "https://management.azure.com"

# stack/arm.py's reads (what `pulumi up` and `fab preflight` ask ARM), each with a path
# of the form ops/preflight/azure.py and stack/arm.py send.
_BASE = f"/subscriptions/{SUBSCRIPTION}"
ARM_READS: dict[str, tuple[str, dict[str, str], Builder]] = {
    "providers": (
        f"{_BASE}/providers/Microsoft.Compute",
        {},
        Builder("azure.mgmt.resource.resources.v2021_04_01.operations._operations",
                "build_providers_get_request"),
    ),
    "skus": (
        f"{_BASE}/providers/Microsoft.Compute/skus",
        {"$filter": "location eq 'eastus'"},
        Builder(f"{_COMPUTE}._resource_skus_operations", "build_list_request"),
    ),
    "usages": (
        f"{_BASE}/providers/Microsoft.Compute/locations/eastus/usages",
        {},
        Builder(f"{_COMPUTE}._usage_operations", "build_list_request"),
    ),
    "budgets": (
        f"{_BASE}/providers/Microsoft.Consumption/budgets",
        {},
        Builder("azure.mgmt.consumption.operations._operations", "build_budgets_list_request"),
    ),
    "virtual_machines": (
        f"{VM_ID}/instanceView",
        {},
        Builder(f"{_COMPUTE}._virtual_machines_operations", "build_instance_view_request"),
    ),
    "subscriptions": (
        "/subscriptions",
        {},
        Builder("azure.mgmt.resource.subscriptions.v2022_12_01.operations._operations",
                "build_subscriptions_list_request"),
    ),
}  # fmt: skip
# Not in any version of the Authorization spec at subscription scope (only resource
# group and resource): the version is checked against the resource-group form's.
PERMISSIONS_AT_SUBSCRIPTION = (
    f"{_BASE}/providers/Microsoft.Authorization/permissions",
    Builder("azure.mgmt.authorization.v2022_04_01.operations._permissions_operations",
            "build_list_for_resource_group_request"),
)  # fmt: skip


def arm_read_urls() -> dict[str, str]:
    """The URL of each of stack/arm.py's reads, as ArmClient makes it."""
    client = ArmClient("token")
    paths = {**{k: (p, q) for k, (p, q, _) in ARM_READS.items()},
             "permissions": (PERMISSIONS_AT_SUBSCRIPTION[0], {})}  # fmt: skip
    assert set(paths) | {api for _, api in OPS_CALLS} == set(API_VERSIONS), (
        "a call of stack/arm.py has no reference here"
    )
    return {api: client.url(path, api, **query) for api, (path, query) in paths.items()}


def watchdog_deallocate_url() -> str:
    """What the box's watchdog sends (tests/box/test_billing_stop.py proves the
    form: `<arm_url><VM id>/deallocate?api-version=<arm_api_version>`)."""
    config = WatchdogConfig("azure", 30)
    return f"{config.arm_url}{VM_ID}/deallocate?api-version={config.arm_api_version}"


def watchdog_tags_url() -> str:
    """Where the box's watchdog reads and deletes its VM's tags (the box tests prove the
    form: `<arm_url><VM id><ARM_TAGS_PATH>?api-version=<ARM_TAGS_API_VERSION>`)."""
    config = WatchdogConfig("azure", 30)
    return f"{config.arm_url}{VM_ID}{ARM_TAGS_PATH}?api-version={ARM_TAGS_API_VERSION}"


def workflow_calls(definition: dict) -> list[tuple[str, dict]]:
    """(action name, inputs) of every HTTP action of a Logic App definition, nested
    ones (a Switch's cases) included."""
    return list(_http_actions(definition["actions"]))


def _http_actions(actions: dict) -> Iterator[tuple[str, dict]]:
    for name, action in actions.items():
        if action["type"] == "Http":
            yield name, action["inputs"]
        for case in [*action.get("cases", {}).values(), action.get("default", {})]:
            yield from _http_actions(case.get("actions", {}))


def call_problems(inputs: dict[str, Any], where: str) -> list[str]:
    """One HTTP action's call against the reference that builds it, its body too."""
    method, url = inputs["method"], inputs["uri"]
    if not url.startswith(f"{ARM}/"):
        return [f"{where}: {url} is not a call to ARM ({ARM})"]
    path = urllib.parse.urlsplit(url).path
    builders = [b for m, b in WORKFLOW_CALLS if m == method and b.arguments_for(path) is not None]
    if len(builders) != 1:
        return [f"{where}: no reference of WORKFLOW_CALLS builds {method} {path}"]
    (builder,) = builders
    found = problems(method, url, builder, where)
    if "body" in inputs and builder in BODIES:
        found += _body_problems(builder, inputs["body"], where)
    return found


# Body members no model can judge, and why (as azure_table.EXCUSED says for the VM).
BODY_EXCUSED = {
    VM_UPDATE: {"hardwareProfile.vmSize": "VirtualMachineSizeTypes is a frozen legacy list"},
}


def _body_problems(builder: Builder, body: dict[str, Any], where: str) -> list[str]:
    models, name = BODIES[builder]
    model = Model(models, name, builder.operations, builder.function, "")
    keys = [spec["key"] for spec in model.model_class._attribute_map.values()]
    if any(key.startswith("properties.") for key in keys):
        # The model flattens `properties` (as azure-native's inputs do): so must the body.
        body = {**{k: v for k, v in body.items() if k != "properties"}, **body["properties"]}
    return body_problems(model, body, where, BODY_EXCUSED.get(builder, {}))


def ops_call_problems(calls: list[tuple[str, str, str, Any]]) -> list[str]:
    """Each recorded (method, path, api, body) of ops' calls against its reference, a
    body against the operation's model."""
    client, found = ArmClient("token"), []
    for method, path, api, body in calls:
        builder = OPS_CALLS.get((method, api))
        if builder is None:
            found.append(f"{method} {path} ({api}): no reference in OPS_CALLS")
            continue
        found += problems(method, client.url(path, api), builder, api)
        if body is not None:
            found += _body_problems(builder, body, api)
    return found


def permissions_version_problems() -> list[str]:
    ours = urllib.parse.parse_qs(urllib.parse.urlsplit(arm_read_urls()["permissions"]).query)
    builder = PERMISSIONS_AT_SUBSCRIPTION[1]
    _, url = builder(resource_group_name="rg", subscription_id=SUBSCRIPTION)
    theirs = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    if ours["api-version"] == theirs["api-version"]:
        return []
    return [f"permissions: api-version {ours['api-version']}, the reference's {theirs}"]


# What `fab start` (ops/cloud/azure.py) sends: power, a start and the deallocate of a
# peer read to their operations' ends, the VM and its size's PATCH, the region's SKUs.
FAB_START_CALLS = (
    ("GET", INSTANCE_VIEW),
    ("POST", START),
    ("POST", DEALLOCATE),
    ("GET", VM_GET),
    ("PATCH", VM_UPDATE),
    ("GET", SKUS),
)


def fab_start_problems(sent: list[tuple[str, str, Any]], endpoint: str) -> list[str]:
    """Each (method, URL, body) `fab start` sent against the reference that builds it; an
    async operation's URL (ARM's to name) must be on the ARM endpoint, nowhere else."""
    found = []
    for method, url, body in sent:
        path = urllib.parse.urlsplit(url).path
        if method == "GET" and "/operations/" in path:
            if not url.startswith(endpoint + "/"):
                found.append(f"operation {url} is not on {endpoint}")
            continue
        builders = [b for m, b in FAB_START_CALLS if m == method and b.arguments_for(path)]
        if len(builders) != 1:
            found.append(f"fab start: no reference of FAB_START_CALLS builds {method} {path}")
            continue
        found += problems(method, url, builders[0], "fab start")
        if body is not None and builders[0] in BODIES:
            found += _body_problems(builders[0], body, "fab start")
    return found
