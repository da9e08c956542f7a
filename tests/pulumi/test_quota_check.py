"""`pulumi up` reads the GPU quota first and refuses before declaring anything."""

from __future__ import annotations

import pulumi
import pytest

from tests.fakes import aws_program, azure_program
from tests.fakes.arm import ArmState, FakeArm, usage

BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"


def _aws_quota(value: float):
    recorder = aws_program.aws_recorder()
    recorder._calls["aws:servicequotas/getServiceQuota:getServiceQuota"] = lambda a: {
        "id": a.args["quotaCode"],
        "quotaCode": a.args["quotaCode"],
        "value": value,
    }
    return recorder


def test_aws_refuses_a_new_account_without_gpu_quota_before_any_resource():
    recorder = _aws_quota(0.0)
    with pytest.raises(pulumi.RunError) as info:
        aws_program.run_stack(recorder, nodeCount="2")
    message = str(info.value)
    assert "'Running On-Demand G and VT instances' (L-DB2E81BA) is 0 vCPUs" in message
    assert "needs 8 more" in message  # 2 x g5.xlarge (4 vCPUs)
    assert "--quota-code L-DB2E81BA --desired-value 8 --region us-east-1" in message
    assert recorder.resources == []


def test_aws_spot_boxes_are_checked_against_the_spot_quota():
    recorder = _aws_quota(0.0)
    with pytest.raises(pulumi.RunError, match=r"All G and VT Spot Instance Requests.*L-3819A6DF"):
        aws_program.run_stack(recorder, spot="true")
    (_, args) = next(c for c in recorder.calls if "getServiceQuota" in c[0])
    assert (args["serviceCode"], args["quotaCode"]) == ("ec2", "L-3819A6DF")


def test_aws_p_family_boxes_draw_on_the_p_quota():
    recorder = _aws_quota(8.0)
    with pytest.raises(pulumi.RunError, match=r"Running On-Demand P instances.*needs 96 more"):
        aws_program.run_stack(recorder, vmSize="p4d.24xlarge")


def test_aws_quota_that_fits_lets_the_up_proceed():
    result = aws_program.run_stack(_aws_quota(4.0))
    assert result.of_type(BOXES)


def test_aws_quota_that_cannot_be_read_only_warns():
    recorder = aws_program.aws_recorder()
    recorder._calls["aws:servicequotas/getServiceQuota:getServiceQuota"] = lambda a: (
        {},
        [("", "AccessDeniedException: servicequotas:GetServiceQuota")],
    )
    assert aws_program.run_stack(recorder).of_type(BOXES)


@pytest.fixture
def arm():
    fake = FakeArm()
    yield fake
    fake.close()


def test_azure_refuses_a_family_quota_of_zero_before_any_resource(arm):
    arm.state.usages["eastus"] = [usage("cores", 100), usage("standardNCASv3_T4Family", 0)]
    recorder = azure_program.azure_recorder()
    with pytest.raises(pulumi.RunError) as info:
        azure_program.run_stack(recorder, arm=arm, vmSize="Standard_NC4as_T4_v3")
    message = str(info.value)
    assert "standardNCASv3_T4Family vCPUs" in message and "needs 4 more" in message
    assert "az quota update --resource-name standardNCASv3_T4Family" in message
    assert recorder.resources == []


def test_azure_reads_usages_with_the_deployers_own_token(arm):
    azure_program.run_stack(arm=arm)
    paths = {path: token for path, token in arm.state.requests}
    usages = "/providers/Microsoft.Compute/locations/eastus/usages"
    assert any(path.endswith(usages) for path in paths)
    assert set(paths.values()) == {azure_program.USER_TOKEN}


def test_azure_spot_boxes_are_checked_against_the_spot_pool(arm):
    arm.state = ArmState(usages={"eastus": [usage("lowPriorityCores", 3)]})
    with pytest.raises(pulumi.RunError, match=r"Total Regional Spot vCPUs.*lowPriorityCores"):
        azure_program.run_stack(arm=arm, spot="true")


def test_azure_boxes_already_running_are_not_counted_against_a_later_up(arm):
    # On a second `pulumi up` the family's usage is this stack's own box.
    arm.state.usages["eastus"] = [
        usage("cores", 100, current=24),
        usage("StandardNCADSA100v4Family", 24, current=24),
    ]
    assert azure_program.run_stack(arm=arm).of_type("azure-native:compute:VirtualMachine")


def test_azure_arm_out_of_reach_only_warns(arm):
    arm.close()
    assert azure_program.run_stack(arm=arm).of_type("azure-native:compute:VirtualMachine")
