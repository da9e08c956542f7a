"""The keeper: a Logic App that holds Azure boxes to their run's deadline, without a human.

`fab train --hours H` gives a run a deadline past the nightly stop: `fab` writes it on
every VM of the stack as the tag `glucose-deadline` (box.contract.DEADLINE_TAG, UTC
as DEADLINE_TAG_FORMAT) and, when it is later than the next daily stop, turns each VM's
daily-stop schedule off. Every 5 minutes the keeper reads each VM (its tags and power
state) and its schedule, and per VM does at most one thing:

- the deadline has come: deallocate the VM (the cloud-enforced hard stop), delete the
  tag, and turn the daily stop back on;
- no deadline (never set, or deleted by whoever stopped the run early: the watchdog,
  `fab stop`, the budget stop) while the daily stop is off: turn it back on, so the
  next day's stop comes;
- the deadline is ahead, the stack recovers (`autoRecover`) and the VM is deallocated
  (a spot eviction, a host failure): start it. A start Azure refuses for short
  capacity is simply tried again by the next run.

A schedule's PATCH changes only its tags ("all other properties will be ignored",
GlobalSchedules_Update, api 2018-09-15), so the keeper turns a stop back on with a PUT
of the schedule as the program declares it (`guard_rails.daily_stop_properties`).

Its identity holds, on each VM, the power-on-off role (read, start, deallocate) and Tag
Contributor, and Virtual Machine Contributor on each schedule alone (see access.py).
Until those grants reach ARM the first runs fail and the next ones succeed. The cost is
the Logic App's actions: one trigger per run and three actions per VM (two reads, one
decision), about 26,000 a VM-month at the 5-minute recurrence.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import compute, devtestlab, logic, resources

from box.contract import DEADLINE_TAG, DEADLINE_TAG_FORMAT
from box.watchdog_config import ARM_API_VERSION
from infra.azure.access import (
    POWER_ON_OFF,
    SERVICE_PRINCIPAL,
    TAG_CONTRIBUTOR,
    VM_CONTRIBUTOR,
    builtin_role,
    grant,
)
from infra.azure.guard_rails import (
    SCHEDULES_API_VERSION,
    arm_action,
    daily_stop_properties,
    untag_action,
    workflow_definition,
)
from stack.config import StackConfig

KEEPER_TRIGGER = "every_5_minutes"
KEEPER_MINUTES = 5
# What the keeper's decision for a VM comes to (its Switch's cases); anything else
# (a deadline ahead on a running VM, no deadline with the stop on) leaves it be.
EXPIRE = "deadline-passed"
RESTORE_STOP = "no-deadline-stop-off"
RECOVER = "deallocated-before-deadline"
DEALLOCATED = "PowerState/deallocated"
# What "now" is compared with when there is no deadline (the comparison is made all
# the same, see `_decision`): a time never reached.
NEVER = datetime.datetime(9999, 12, 31, 23, 59, 59).strftime(DEADLINE_TAG_FORMAT)


@dataclass(frozen=True)
class KeptBox:
    """One VM the keeper holds to its deadline, and its daily-stop schedule."""

    vm_id: str
    schedule_id: str
    schedule: dict[str, Any]
    """The schedule's ARM body as the program declares it (`location`, `tags`,
    `properties`): what the keeper PUTs to turn the daily stop back on."""


def declare_keeper(
    name: str,
    vms: Sequence[compute.VirtualMachine],
    schedules: Sequence[devtestlab.GlobalSchedule],
    group: resources.ResourceGroup,
    subscription_id: pulumi.Input[str],
    config: StackConfig,
    parent: pulumi.Resource,
) -> logic.Workflow:
    """The keeper of `vms` (rank order) and their daily stops, with the roles it needs."""
    vm_ids, schedule_ids = [vm.id for vm in vms], [schedule.id for schedule in schedules]
    definition = pulumi.Output.all(group.location, vm_ids, schedule_ids).apply(
        lambda resolved: keeper_workflow(_kept_boxes(config, *resolved), config.recovers)
    )
    workflow = logic.Workflow(
        name,
        resource_group_name=group.name,
        location=group.location,
        identity={"type": "SystemAssigned"},
        state="Enabled",
        definition=definition,
        tags=config.tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    identity = workflow.identity.apply(lambda i: i.principal_id)
    for index, (vm, schedule) in enumerate(zip(vms, schedules, strict=True)):
        for verb, scope, role in (
            ("power", vm.id, POWER_ON_OFF),
            ("untag", vm.id, TAG_CONTRIBUTOR),
            ("stop-schedule", schedule.id, VM_CONTRIBUTOR),
        ):
            role_id = builtin_role(subscription_id, role)
            grant(f"{name}-{index}-{verb}", identity, scope, role_id, parent, SERVICE_PRINCIPAL)
    return workflow


def _kept_boxes(
    config: StackConfig, location: str, vm_ids: Sequence[str], schedule_ids: Sequence[str]
) -> list[KeptBox]:
    return [
        KeptBox(
            vm_id,
            schedule_id,
            {
                "location": location,
                "tags": config.tags,
                "properties": daily_stop_properties(config, vm_id),
            },
        )
        for vm_id, schedule_id in zip(vm_ids, schedule_ids, strict=True)
    ]


def keeper_workflow(boxes: Sequence[KeptBox], recovers: bool) -> dict:
    """The keeper's Logic App definition: a 5-minute recurrence that never overlaps
    itself, then per VM, all VMs in parallel: read the VM and its schedule, decide, act.
    The recover case exists only when the stack `recovers`."""
    actions: dict[str, Any] = {}
    for index, box in enumerate(boxes):
        read_vm, read_schedule = f"read_vm_{index}", f"read_schedule_{index}"
        actions[read_vm] = arm_action("GET", box.vm_id, ARM_API_VERSION, expand="instanceView")
        actions[read_schedule] = arm_action("GET", box.schedule_id, SCHEDULES_API_VERSION)
        cases = {
            "expire": {"case": EXPIRE, "actions": _expire(index, box, read_vm)},
            "restore_stop": {
                "case": RESTORE_STOP,
                "actions": {f"restore_stop_{index}": _enable_stop(box)},
            },
        }
        if recovers:
            # Short capacity refuses the start; the next run (5 min) asks again.
            start = arm_action("POST", f"{box.vm_id}/start", ARM_API_VERSION)
            cases["recover"] = {"case": RECOVER, "actions": {f"start_{index}": start}}
        actions[f"decide_{index}"] = {
            "type": "Switch",
            "expression": f"@{_decision(read_vm, read_schedule)}",
            "cases": {f"{name}_{index}": case for name, case in cases.items()},
            "default": {"actions": {}},
            "runAfter": {read_vm: ["Succeeded"], read_schedule: ["Succeeded"]},
        }
    trigger = {
        "type": "Recurrence",
        "recurrence": {"frequency": "Minute", "interval": KEEPER_MINUTES},
        # One run at a time: a slow run's successor waits instead of acting twice.
        "runtimeConfiguration": {"concurrency": {"runs": 1}},
    }
    return workflow_definition({KEEPER_TRIGGER: trigger}, actions)


def _decision(read_vm: str, read_schedule: str) -> str:
    """The keeper's verdict for one VM, an expression of the Workflow Definition Language
    over the two reads. Its `if` evaluates both branches, so nothing in either may fail
    on an absent deadline: each use of the deadline has a stand-in."""
    deadline = _deadline(read_vm)
    none = f"empty(coalesce({deadline}, ''))"  # absent, or set to nothing
    stop_off = f"equals(body('{read_schedule}')?['properties']?['status'], 'Disabled')"
    passed = f"greaterOrEquals(ticks(utcNow()), ticks(if({none}, '{NEVER}', {deadline})))"
    statuses = f"string(body('{read_vm}')?['properties']?['instanceView']?['statuses'])"
    deallocated = f"contains({statuses}, '{DEALLOCATED}')"
    return (
        f"if({none}, if({stop_off}, '{RESTORE_STOP}', 'keep'), "
        f"if({passed}, '{EXPIRE}', if({deallocated}, '{RECOVER}', 'keep')))"
    )


def _expire(index: int, box: KeptBox, read_vm: str) -> dict[str, Any]:
    """Deallocate; then delete the tag (a failed deallocate keeps it, so the next run
    tries again) and, whatever the deallocate did, turn the daily stop back on."""
    deallocate = f"deallocate_{index}"
    untag = untag_action(box.vm_id, _deadline(read_vm), after={deallocate: ["Succeeded"]})
    return {
        deallocate: arm_action("POST", f"{box.vm_id}/deallocate", ARM_API_VERSION),
        f"untag_{index}": untag,
        f"restore_stop_after_deadline_{index}": _enable_stop(box),
    }


def _deadline(read_vm: str) -> str:
    """The run's deadline as the VM read says it; null when it has none."""
    return f"body('{read_vm}')?['tags']?['{DEADLINE_TAG}']"


def _enable_stop(box: KeptBox) -> dict[str, Any]:
    return arm_action("PUT", box.schedule_id, SCHEDULES_API_VERSION, body=box.schedule)
