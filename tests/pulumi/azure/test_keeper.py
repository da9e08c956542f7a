"""The Azure keeper: every 5 minutes, each box is held to its run's deadline (issue 24).

Its decisions are the Logic App's own expression, evaluated over what ARM would answer
for the VM and its schedule (tests/fakes/logic_expressions.py evaluates it as Azure
does, both branches of every `if`); what each decision does is the definition's
actions; what the stack declares for it comes from the real program under mocks.
"""

from __future__ import annotations

import datetime

import pytest

from box.contract import DEADLINE_TAG, DEADLINE_TAG_FORMAT
from box.watchdog_config import ARM_API_VERSION
from infra.azure.keeper import EXPIRE, RECOVER, RESTORE_STOP, KeptBox, keeper_workflow
from tests.fakes import azure_program
from tests.fakes.logic_expressions import ExpressionError, evaluate
from tests.fakes.pulumi_mocks import RunResult, unwrap

ARM = "https://management.azure.com"
GROUP = "/subscriptions/s/resourceGroups/g/providers"
VM_ID = f"{GROUP}/Microsoft.Compute/virtualMachines/glucose-0-vm"
SCHEDULE_ID = f"{GROUP}/Microsoft.DevTestLab/schedules/shutdown-computevm-glucose-0-vm"
SCHEDULE_BODY = {"location": "eastus", "tags": {}, "properties": {"status": "Enabled"}}
BOX = KeptBox(VM_ID, SCHEDULE_ID, SCHEDULE_BODY)
NOW = datetime.datetime(2026, 11, 22, 3, 0, tzinfo=datetime.timezone.utc)
WORKFLOW = "azure-native:logic:Workflow"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
SCHEDULE = "azure-native:devtestlab:GlobalSchedule"
VM = "azure-native:compute:VirtualMachine"


def _vm(deadline: str | None = None, power: str = "PowerState/running") -> dict:
    """A VM as ARM answers a GET with `$expand=instanceView`."""
    return {
        "id": VM_ID,
        "tags": {"owner": "ana"} | ({DEADLINE_TAG: deadline} if deadline is not None else {}),
        "properties": {
            "instanceView": {
                "statuses": [
                    {"code": "ProvisioningState/succeeded", "level": "Info"},
                    {"code": power, "level": "Info", "displayStatus": "VM"},
                ]
            }
        },
    }


def _schedule(status: str = "Enabled") -> dict:
    return {
        "id": SCHEDULE_ID,
        "properties": {"status": status, "taskType": "ComputeVmShutdownTask"},
    }


def _decide(workflow: dict, vm: dict, schedule: dict) -> dict:
    """The actions the keeper's decision for box 0 runs (none when it leaves it be)."""
    switch = workflow["actions"]["decide_0"]
    bodies = {"read_vm_0": vm, "read_schedule_0": schedule}
    verdict = evaluate(switch["expression"], bodies, NOW)
    cases = [case for case in switch["cases"].values() if case["case"] == verdict]
    return cases[0]["actions"] if cases else switch["default"]["actions"]


def _calls(actions: dict) -> set[tuple[str, str]]:
    return {(a["inputs"]["method"], a["inputs"]["uri"].split("?")[0]) for a in actions.values()}


AN_HOUR_AGO, IN_AN_HOUR = "2026-11-22T02:00:00Z", "2026-11-22T04:00:00Z"
RECOVERING = keeper_workflow([BOX], recovers=True)
NOT_RECOVERING = keeper_workflow([BOX], recovers=False)


# --- what it decides -------------------------------------------------------------------


def test_a_passed_deadline_deallocates_the_box_deletes_the_tag_and_restores_the_stop():
    actions = _decide(RECOVERING, _vm(AN_HOUR_AGO), _schedule("Disabled"))
    assert _calls(actions) == {
        ("POST", f"{ARM}{VM_ID}/deallocate"),
        ("PATCH", f"{ARM}{VM_ID}/providers/Microsoft.Resources/tags/default"),
        ("PUT", f"{ARM}{SCHEDULE_ID}"),
    }


def test_the_deadline_itself_is_passed():
    deadline = NOW.strftime(DEADLINE_TAG_FORMAT)  # as `fab` writes it (ops/cloud/azure.py)
    actions = _decide(RECOVERING, _vm(deadline), _schedule("Disabled"))
    assert ("POST", f"{ARM}{VM_ID}/deallocate") in _calls(actions)


def test_a_passed_deadline_stops_the_box_on_a_stack_that_does_not_recover_too():
    actions = _decide(NOT_RECOVERING, _vm(AN_HOUR_AGO, "PowerState/deallocated"), _schedule())
    assert ("POST", f"{ARM}{VM_ID}/deallocate") in _calls(actions)


def test_a_deadline_ahead_leaves_a_running_box_be():
    assert _decide(RECOVERING, _vm(IN_AN_HOUR), _schedule("Disabled")) == {}


def test_an_evicted_box_is_started_before_its_deadline_when_the_stack_recovers():
    actions = _decide(RECOVERING, _vm(IN_AN_HOUR, "PowerState/deallocated"), _schedule())
    assert _calls(actions) == {("POST", f"{ARM}{VM_ID}/start")}


def test_an_evicted_box_stays_down_when_the_stack_does_not_recover():
    actions = _decide(NOT_RECOVERING, _vm(IN_AN_HOUR, "PowerState/deallocated"), _schedule())
    assert actions == {}
    assert all(
        case["case"] != RECOVER for case in NOT_RECOVERING["actions"]["decide_0"]["cases"].values()
    )


def test_a_box_still_deallocating_is_not_started():
    assert _decide(RECOVERING, _vm(IN_AN_HOUR, "PowerState/deallocating"), _schedule()) == {}


def test_no_deadline_and_a_stop_left_off_turn_the_stop_back_on():
    # The watchdog deletes the tag when a run ends early; the next day's stop must come.
    actions = _decide(RECOVERING, _vm(), _schedule("Disabled"))
    assert _calls(actions) == {("PUT", f"{ARM}{SCHEDULE_ID}")}


def test_an_empty_deadline_counts_as_none():
    actions = _decide(RECOVERING, _vm(""), _schedule("Disabled"))
    assert _calls(actions) == {("PUT", f"{ARM}{SCHEDULE_ID}")}


def test_no_deadline_and_the_stop_on_leave_the_box_be():
    assert _decide(RECOVERING, _vm(), _schedule("Enabled")) == {}


def test_a_deallocated_box_without_a_deadline_is_never_started():
    # A stop somebody asked for deletes the tag first, so it stays a stop.
    assert _decide(RECOVERING, _vm(power="PowerState/deallocated"), _schedule()) == {}


def test_the_evaluator_fails_on_the_branch_not_taken_as_azure_does():
    # What makes the tests above catch a deadline the decision cannot read.
    with pytest.raises(ExpressionError):
        evaluate("@if(true, 'keep', ticks(''))", {}, NOW)


# --- how it acts -----------------------------------------------------------------------


def _case(workflow: dict, verdict: str) -> dict:
    (case,) = [c for c in workflow["actions"]["decide_0"]["cases"].values() if c["case"] == verdict]
    return case["actions"]


def test_the_tag_is_deleted_only_once_the_deallocate_went_through():
    # A refused deallocate keeps the tag, so the next run tries again.
    actions = _case(RECOVERING, EXPIRE)
    assert actions["untag_0"]["runAfter"] == {"deallocate_0": ["Succeeded"]}
    assert actions["deallocate_0"]["runAfter"] == {}


def test_the_stop_comes_back_after_the_deadline_whatever_the_deallocate_did():
    assert _case(RECOVERING, EXPIRE)["restore_stop_after_deadline_0"]["runAfter"] == {}


def test_the_tag_delete_names_the_deadline_the_vm_carries():
    body = _case(RECOVERING, EXPIRE)["untag_0"]["inputs"]["body"]
    assert body["operation"] == "Delete"
    assert body["properties"]["tags"] == {
        DEADLINE_TAG: f"@body('read_vm_0')?['tags']?['{DEADLINE_TAG}']"
    }


def test_a_stop_is_turned_back_on_with_a_put_of_the_whole_schedule():
    # A schedule's PATCH changes only its tags (GlobalSchedules_Update, 2018-09-15).
    (restore,) = _case(RECOVERING, RESTORE_STOP).values()
    assert restore["inputs"]["method"] == "PUT"
    assert restore["inputs"]["uri"] == f"{ARM}{SCHEDULE_ID}?api-version=2018-09-15"
    assert restore["inputs"]["body"] == SCHEDULE_BODY


def test_each_box_is_read_with_its_power_state_and_its_schedule():
    actions = RECOVERING["actions"]
    assert actions["read_vm_0"]["inputs"]["uri"] == (
        f"{ARM}{VM_ID}?api-version={ARM_API_VERSION}&$expand=instanceView"
    )
    assert (
        actions["read_schedule_0"]["inputs"]["uri"] == f"{ARM}{SCHEDULE_ID}?api-version=2018-09-15"
    )
    assert actions["decide_0"]["runAfter"] == {
        "read_vm_0": ["Succeeded"],
        "read_schedule_0": ["Succeeded"],
    }


def test_every_call_is_made_with_the_keepers_own_identity():
    def calls(actions: dict):
        for action in actions.values():
            if action["type"] == "Switch":
                for case in action["cases"].values():
                    yield from calls(case["actions"])
            else:
                yield action["inputs"]

    found = list(calls(RECOVERING["actions"]))
    assert len(found) == 7
    assert all(
        call["authentication"] == {"type": "ManagedServiceIdentity", "audience": f"{ARM}/"}
        for call in found
    )


def test_it_runs_every_5_minutes_one_run_at_a_time():
    (trigger,) = RECOVERING["triggers"].values()
    assert trigger["type"] == "Recurrence"
    assert trigger["recurrence"] == {"frequency": "Minute", "interval": 5}
    assert trigger["runtimeConfiguration"] == {"concurrency": {"runs": 1}}


def test_each_box_is_decided_on_its_own():
    second = KeptBox(VM_ID.replace("-0-", "-1-"), SCHEDULE_ID.replace("-0-", "-1-"), SCHEDULE_BODY)
    actions = keeper_workflow([BOX, second], recovers=True)["actions"]
    assert actions["decide_1"]["runAfter"] == {
        "read_vm_1": ["Succeeded"],
        "read_schedule_1": ["Succeeded"],
    }
    assert actions["read_vm_1"]["inputs"]["uri"].startswith(f"{ARM}{second.vm_id}?")


# --- what the stack declares -----------------------------------------------------------


@pytest.fixture(scope="module")
def pair() -> RunResult:
    return azure_program.run_stack(nodeCount="2", spot="true")


def _keeper(result: RunResult):
    return result.named("glucose-keeper")


@pytest.mark.parametrize(
    "overrides",
    [{}, {"budgetStopsBoxes": "false"}, {"spot": "true", "autoRecover": "false"}],
    ids=["default", "no-budget-stop", "spot-not-recovering"],
)
def test_every_azure_stack_has_a_keeper(overrides):
    workflow = _keeper(azure_program.run_stack(**overrides)).inputs
    assert workflow["identity"] == {"type": "SystemAssigned"} and workflow["state"] == "Enabled"


def _recovers(result: RunResult) -> bool:
    cases = unwrap(_keeper(result).inputs["definition"])["actions"]["decide_0"]["cases"]
    return any(case["case"] == RECOVER for case in cases.values())


def test_a_spot_stack_recovers_by_default(pair):
    assert _recovers(pair)


def test_an_on_demand_stack_recovers_only_when_it_says_so():
    assert not _recovers(azure_program.run_stack())
    assert _recovers(azure_program.run_stack(autoRecover="true"))


def test_the_keeper_holds_every_box_with_its_own_schedule(pair):
    actions = unwrap(_keeper(pair).inputs["definition"])["actions"]
    schedule_of = {s.inputs["targetResourceId"]: s.id for s in pair.of_type(SCHEDULE)}
    for index, vm_id in enumerate(pair.exports["boxIds"]):
        assert actions[f"read_vm_{index}"]["inputs"]["uri"].startswith(f"{ARM}{vm_id}?")
        assert actions[f"read_schedule_{index}"]["inputs"]["uri"].startswith(
            f"{ARM}{schedule_of[vm_id]}?"
        )


def test_a_restored_stop_is_the_schedule_the_program_declares(pair):
    actions = unwrap(_keeper(pair).inputs["definition"])["actions"]
    for schedule in pair.of_type(SCHEDULE):
        index = pair.exports["boxIds"].index(schedule.inputs["targetResourceId"])
        (case,) = [
            c for c in actions[f"decide_{index}"]["cases"].values() if c["case"] == RESTORE_STOP
        ]
        (restore,) = case["actions"].values()
        put = restore["inputs"]["body"]
        declared = schedule.inputs
        assert put["location"] == declared["location"] and put["tags"] == declared["tags"]
        outside_properties = {"name", "resourceGroupName", "location", "tags"}
        assert put["properties"] == {
            k: v for k, v in declared.items() if k not in outside_properties
        }


def test_the_keeper_may_power_and_untag_each_box_and_write_its_schedule_only(pair):
    principal = _keeper(pair).outputs["identity"]["principalId"]
    grants = {
        (
            r.inputs["scope"],
            r.inputs["roleDefinitionId"].rsplit("/", 1)[1],
            r.inputs["principalType"],
        )
        for r in pair.of_type(ROLE_ASSIGNMENT)
        if r.inputs["principalId"] == principal
    }
    vms = [vm.id for vm in pair.of_type(VM)]
    schedules = [s.id for s in pair.of_type(SCHEDULE)]
    assert grants == (
        {(vm, "40c5ff49-9181-41f8-ae61-143b0e78555e", "ServicePrincipal") for vm in vms}
        | {(vm, "4a9ae827-6dc8-4573-8ac7-8239d42aa03f", "ServicePrincipal") for vm in vms}
        | {(s, "9980e02c-c2be-4d73-94e8-173b1dc7cf3c", "ServicePrincipal") for s in schedules}
    )


def test_a_box_left_be_costs_three_actions_a_run():
    # docs/azure.md prices the keeper by it: two reads and the decision per box.
    assert [name for name in RECOVERING["actions"] if name.endswith("_0")] == [
        "read_vm_0",
        "read_schedule_0",
        "decide_0",
    ]
