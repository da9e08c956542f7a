"""`fab plan` says what a run over several boxes of a size talks over: EFA unused on
p4d/p5 and why, InfiniBand left on on Azure ND but not yet taken (the image)."""

from __future__ import annotations

from ops.plan import estimate as plan
from stack import catalog


def _notes(*names: str) -> tuple[str, ...]:
    sizes = [catalog.lookup(name, cloud) for name, cloud in (n.split("/") for n in names)]
    return plan.make_plan(plan.PlanRequest(windows=600_000, epochs=1), sizes).notes


def test_a_plan_with_efa_sizes_says_efa_is_unused_and_what_it_needs():
    [said] = [note for note in _notes("p5.48xlarge/aws", "g6.xlarge/aws") if "EFA" in note]
    assert said.startswith("p5.48xlarge: a run over several boxes")
    assert "aws-ofi-nccl plugin and libfabric in the image" in said


def test_a_plan_with_nd_sizes_says_infiniband_is_left_on():
    [said] = [note for note in _notes("Standard_ND96asr_v4/azure") if "InfiniBand" in note]
    assert "left on" in said and "verbs libraries" in said


def test_a_plan_of_ethernet_sizes_says_nothing_of_a_fabric():
    assert not [n for n in _notes("g6.xlarge/aws") if "EFA" in n or "InfiniBand" in n]
