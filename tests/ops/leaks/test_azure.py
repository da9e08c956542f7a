"""`fab leaks` on Azure, against a fake of ARM's listings (tests/fakes/arm_listings.py):
the stack's VMs, disks, network interfaces, public IPs and snapshots, in its tagged
resource groups or tagged anywhere, each with what it bills; exit 1, or 0 when clean."""

from __future__ import annotations

import pytest

from ops.leaks import azure
from ops.leaks.azure import ArmReader
from ops.leaks.found import LeakCheckError
from ops.leaks.scope import StackScope
from tests.fakes.arm_listings import SUBSCRIPTION, FakeArmListings, ListingState, Vm
from tests.fixtures.clouds import logged_in_az
from tests.ops.leaks.conftest import COST_SCOPE, STACK, assert_listed, write_stack
from tests.ops.leaks.conftest import report_line as _line
from tests.pulumi.references.arm_urls import Builder, problems

OURS = {"cost-scope": COST_SCOPE}
COMPUTE, NETWORK = "Microsoft.Compute", "Microsoft.Network"


@pytest.fixture
def arm(tmp_path, monkeypatch):
    """The fake listings, and a logged-in Azure CLI on PATH."""
    logged_in_az(tmp_path, monkeypatch)
    fake = FakeArmListings(ListingState())
    monkeypatch.setenv("GLUCOSE_ARM_ENDPOINT", fake.endpoint)
    yield fake
    fake.close()


def _one_of_each(arm: FakeArmListings) -> dict[str, str]:
    """A kept resource group (keepStorageOnDestroy) still holding one of each kind."""
    group = arm.group("glucose-training-box-rg1a2b3c", OURS)
    vm = arm.resource(group, f"{COMPUTE}/virtualMachines", "glucose-training-box-0-vm", tags=OURS)
    arm.state.vms[vm] = Vm("Standard_NC24ads_A100_v4", "PowerState/running")
    return {
        "VM": vm,
        # Azure made it with the VM: no tag of ours, found in the tagged group.
        "disk": arm.resource(
            group,
            f"{COMPUTE}/disks",
            "glucose-training-box-0-vm_OsDisk_1",
            sku={"name": "Premium_LRS"},
            managedBy=vm,
        ),
        "network interface": arm.resource(group, f"{NETWORK}/networkInterfaces", "nic0", tags=OURS),
        "public IP": arm.resource(
            group, f"{NETWORK}/publicIPAddresses", "ip0", tags=OURS, sku={"name": "Standard"}
        ),
        # Somewhere else, tagged by hand or by a script: found by its tag.
        "snapshot": arm.resource(
            arm.group("scratch"), f"{COMPUTE}/snapshots", "box-0-before", tags=OURS
        ),
    }


def test_one_leftover_of_each_kind_is_listed_with_its_cost_and_exits_1(arm, tmp_path, fab_leaks):
    left = _one_of_each(arm)
    write_stack(tmp_path, "azure", "eastus")
    done = fab_leaks("--stack", STACK)
    assert_listed(done, left)
    vm = _line(done.stdout, left["VM"])
    assert "running Standard_NC24ads_A100_v4 regular" in vm
    assert "$3.673/h (Standard_NC24ads_A100_v4 on demand, catalog 2025-07-01)" in vm
    assert "Premium_LRS attached to glucose-training-box-0-vm" in _line(done.stdout, left["disk"])
    assert "cost unknown: disks are not priced here" in _line(done.stdout, left["disk"])
    assert "$0.000/h (no charge of its own" in _line(done.stdout, left["network interface"])
    assert "5 things left" in done.stdout
    assert "cost unknown for 3 (disk, public IP, snapshot)" in done.stdout
    # Every page was read with the login's token, and only from ARM itself.
    assert {token for _, token in arm.state.requests} == {"deployer-token"}
    assert any("skiptoken" in path for path, _ in arm.state.requests)  # a listing was paged


def test_a_deallocated_vm_bills_no_compute_but_its_disks_are_said(arm, tmp_path, fab_leaks):
    group = arm.group("rg", OURS)
    vm = arm.resource(group, f"{COMPUTE}/virtualMachines", "box-0-vm")
    arm.state.vms[vm] = Vm("Standard_NC4as_T4_v3", "PowerState/deallocated", "Spot")
    write_stack(tmp_path, "azure", "eastus")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 1
    line = _line(done.stdout, vm)
    assert "deallocated Standard_NC4as_T4_v3 spot" in line
    assert "$0.000/h (deallocated: no compute billed; its disks are listed)" in line


def test_a_stopped_but_allocated_vm_bills_at_its_sizes_spot_price(arm):
    vm = arm.resource(arm.group("rg", OURS), f"{COMPUTE}/virtualMachines", "box-0-vm")
    arm.state.vms[vm] = Vm("Standard_NC4as_T4_v3", "PowerState/stopped", "Spot")
    (leak,) = azure.find(_scope(), ArmReader("token"))
    assert (leak.cost.usd_per_hour, leak.cost.basis) == (
        0.21,
        "Standard_NC4as_T4_v3 spot, catalog 2025-07-01",
    )


def test_only_the_stacks_own_groups_and_tags_are_read(arm, tmp_path, fab_leaks):
    other = arm.group("glucose-training-prod-rg", {"cost-scope": "glucose-training/prod"})
    arm.resource(
        other, f"{COMPUTE}/disks", "prod-disk", tags={"cost-scope": "glucose-training/prod"}
    )
    arm.resource(arm.group("unrelated"), f"{COMPUTE}/disks", "someone-elses")
    write_stack(tmp_path, "azure", "eastus")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == (
        f"stack {STACK} (azure eastus, tag cost-scope={COST_SCOPE}): nothing left that bills."
    )


def test_a_name_from_the_cloud_reaches_the_terminal_escaped(arm, tmp_path, fab_leaks):
    name = "disk\x1b[2J\x1b]8;;http://evil\x07\u202e[red]x"
    disk = arm.resource(arm.group("rg", OURS), f"{COMPUTE}/disks", name, tags=OURS)
    write_stack(tmp_path, "azure", "eastus")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 1
    shown = disk.replace(name, "disk\\x1b[2J\\x1b]8;;http://evil\\x07\\u202e[red]x")
    assert _line(done.stdout, shown).lstrip().startswith("disk")
    assert not any(ch in done.stdout for ch in "\x1b\x07\u202e")


def test_a_next_page_off_arms_endpoint_is_not_followed_and_proves_nothing(arm, tmp_path, fab_leaks):
    for n in range(3):  # three groups: two pages
        arm.group(f"rg{n}", OURS)
    arm.state.next_link_base = "http://127.0.0.1:9"  # elsewhere: the token must not go there
    write_stack(tmp_path, "azure", "eastus")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ARM named a page off" in done.stderr and "nothing is proven" in done.stderr


def test_a_login_seeing_several_subscriptions_is_told_which_key_names_one(arm):
    arm.state.subscriptions.append("00000000-0000-0000-0000-00000000sub2")
    with pytest.raises(LeakCheckError, match="azure-native:subscriptionId"):
        azure.find(_scope(), ArmReader("token"))
    chosen = StackScope(STACK, "azure", "eastus", subscription=SUBSCRIPTION)
    assert azure.find(chosen, ArmReader("token")) == []


def _scope() -> StackScope:
    return StackScope(STACK, "azure", "eastus")


# The URLs `fab leaks` reads, against azure-mgmt's own request builders.
_RESOURCES = "azure.mgmt.resource.resources.v2021_04_01.operations._operations"
GROUPS_LIST = Builder(_RESOURCES, "build_resource_groups_list_request")
RESOURCES_LIST = Builder(_RESOURCES, "build_resources_list_request")
GROUP_RESOURCES = Builder(_RESOURCES, "build_resources_list_by_resource_group_request")
VM_GET = Builder("azure.mgmt.compute.operations._virtual_machines_operations", "build_get_request")


def test_every_url_fab_leaks_reads_is_the_one_azure_mgmt_builds():
    reader = ArmReader("token", "https://management.azure.com")
    groups, tagged = azure.listing_urls(reader, SUBSCRIPTION, _scope())
    group = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg"
    in_group = reader.url(f"{group}/resources", azure.RESOURCES_API_VERSION)
    vm = azure.vm_url(reader, f"{group}/providers/Microsoft.Compute/virtualMachines/box-0-vm")
    found = [
        *problems("GET", groups, GROUPS_LIST, "resource groups"),
        *problems("GET", tagged, RESOURCES_LIST, "tagged resources"),
        *problems("GET", in_group, GROUP_RESOURCES, "a group's resources"),
        *problems("GET", vm, VM_GET, "a VM with its instance view"),
    ]
    assert found == []


def test_a_redirect_is_not_followed_with_the_token(arm):
    elsewhere = FakeArmListings(ListingState())
    try:
        arm.state.redirect_to = f"{elsewhere.endpoint}/subscriptions"
        with pytest.raises(LeakCheckError, match="ARM refused GET /subscriptions: HTTP 302"):
            azure.find(_scope(), ArmReader("secret-token"))
        assert elsewhere.state.requests == []
    finally:
        elsewhere.close()
