"""What one stack declares, against the references: the problems, and what is unmapped.

`declared_problems(stack, result)` checks every custom resource of a program run with
its type's table; `unmapped(result)` names every declared type and input path no table
covers. Both return one line per finding, each naming the stack, the resource and the
input; both empty is what "every value is one the cloud accepts" means here.
"""

from __future__ import annotations

from tzlocal.windows_tz import tz_win

from tests.fakes.aws_program import AUTONAME_SUFFIX
from tests.fakes.pulumi_mocks import Recorded, RunResult
from tests.pulumi.references import aws, azure
from tests.pulumi.references.aws_table import AWS
from tests.pulumi.references.azure_table import (
    AZURE,
    DOCUMENTED,
    DYNAMIC,
    EXCUSED,
    TAG_LIMITS,
)


def declared_problems(stack_id: str, region: str, result: RunResult) -> list[str]:
    found = []
    for resource in result.custom:
        where = f"{stack_id}: {resource.type.rsplit(':', 1)[-1]} {resource.name}"
        if resource.type in AWS:
            found += _aws(resource, where, region)
        elif resource.type in AZURE:
            found += _azure(resource, where)
            found += _windows_zone(resource, result.exports, where)
        elif resource.type in DYNAMIC:
            found += _dynamic(resource, where)
    return found


def unmapped(result: RunResult) -> list[str]:
    found = []
    for resource in result.custom:
        what = f"{resource.type} ({resource.name})"
        if resource.type in AWS:
            known = AWS[resource.type]
            found += [
                f"{what}: input {path!r} has no reference row in references/aws_table.py"
                for path in sorted(set(aws.leaf_paths(resource.inputs)))
                if path not in known
            ]
        elif resource.type in DYNAMIC:
            found += [
                f"{what}: input {key!r} has no row in references/azure_table.py DYNAMIC"
                for key in resource.inputs
                if key not in DYNAMIC[resource.type]
            ]
        elif resource.type not in AZURE:
            found.append(
                f"{what}: no reference mapping for this resource type; add it to "
                "tests/pulumi/references/aws_table.py or azure_table.py"
            )
    return found


def _aws(resource: Recorded, where: str, region: str) -> list[str]:
    inputs = {**resource.inputs, "@name": f"{resource.name}{AUTONAME_SUFFIX}"}
    return [
        problem
        for path, references in AWS[resource.type].items()
        for reference in references
        for problem in aws.check(path, reference, inputs, where, region)
    ]


def _azure(resource: Recorded, where: str) -> list[str]:
    model = AZURE[resource.type]
    in_url = {azure.camel(p) for p in [*model.url_params(), *model.fixed_params()]}
    body = {k: v for k, v in resource.inputs.items() if k not in in_url}
    found = azure.url_problems(model, resource.inputs, resource.name, where)
    found += azure.body_problems(model, body, where, EXCUSED.get(resource.type, {}))
    for documented in DOCUMENTED.get(resource.type, ()) + TAG_LIMITS:
        found += documented.problems(body, where)
    return found


def _dynamic(resource: Recorded, where: str) -> list[str]:
    return [
        f"{where} {key}: {problem}"
        for key, rule in DYNAMIC[resource.type].items()
        if not isinstance(rule, str) and key in resource.inputs
        for problem in rule.problems(resource.inputs[key])
    ]


def _windows_zone(resource: Recorded, exports: dict, where: str) -> list[str]:
    """A schedule's Windows zone is CLDR's for the stack's IANA zone (the model takes any
    string; DevTestLab's valid ids are TimeZoneConverter's, which are CLDR's)."""
    if resource.type != "azure-native:devtestlab:GlobalSchedule":
        return []
    zone = exports["autoShutdownTimeZone"]
    cldr = tz_win.get(zone)
    seen = resource.inputs.get("timeZoneId")
    if seen == cldr:
        return []
    return [f"{where} timeZoneId: {seen!r}, CLDR's windowsZones maps {zone} to {cldr!r}"]
