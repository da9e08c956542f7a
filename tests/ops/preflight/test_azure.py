"""`fab preflight` for an Azure stack, against a local fake of the ARM endpoints."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from ops.preflight import azure as preflight_azure
from stack.arm import ARM_ENDPOINT_ENV, ArmClient
from stack.config import validate
from tests.fakes.arm import SUBSCRIPTION, FakeArm, sku, usage
from tests.ops.conftest import FAB
from tests.paths import REPO

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1Y29zZS10cmFpbmluZy10ZXN0LWtleQ me@laptop"
STACK = {
    "azure-native:location": "eastus",
    "glucose-training:cloud": "azure",
    "glucose-training:vmSize": "Standard_NC24ads_A100_v4",
    "glucose-training:sshPublicKey": KEY,
    "glucose-training:sshAllowedCidr": "198.18.0.7/32",
    "glucose-training:budgetAmount": 200,
    "glucose-training:alertEmails": ["me@lab.dev"],
}
TOKEN = "deployer-token"


@pytest.fixture
def arm():
    fake = FakeArm()
    yield fake
    fake.close()


def check(arm: FakeArm, subscription: str | None = SUBSCRIPTION, **changes):
    values = {**STACK, **{f"glucose-training:{k}": v for k, v in changes.items()}}
    config = validate(
        {k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("glucose-training:")},
        values["azure-native:location"],
        stack="dev",
    )
    return preflight_azure.check(config, ArmClient(TOKEN, arm.endpoint), subscription)


def test_a_healthy_subscription_has_no_problems(arm):
    findings = check(arm)
    assert findings.problems == []
    assert findings.notes == [f"Azure subscription {SUBSCRIPTION}, eastus"]
    assert {token for _, token in arm.state.requests} == {TOKEN}


def test_unregistered_providers_are_listed_with_the_register_command(arm):
    arm.state.registered -= {"Microsoft.DevTestLab", "Microsoft.Consumption"}
    problems = check(arm).problems
    assert problems == [
        f"resource provider {ns} is NotRegistered in this subscription; fix: az provider "
        f"register --namespace {ns} --subscription {SUBSCRIPTION} (takes a minute or two)"
        for ns in ("Microsoft.DevTestLab", "Microsoft.Consumption")
    ]


def test_family_quota_of_zero_names_the_family_and_the_request(arm):
    arm.state.usages["eastus"] = [usage("cores", 100), usage("StandardNCADSA100v4Family", 0)]
    (problem,) = check(arm).problems
    assert "StandardNCADSA100v4Family vCPUs" in problem and "is 0 vCPUs" in problem
    assert "needs 24 more" in problem and "az quota update" in problem


def test_regional_total_counts_what_else_runs(arm):
    arm.state.usages["eastus"] = [
        usage("cores", 30, current=10),
        usage("StandardNCADSA100v4Family", 96),
    ]
    (problem,) = check(arm).problems
    assert "'Total Regional vCPUs' (cores) is 30 vCPUs with 10 in use" in problem


def test_spot_draws_on_the_spot_pool_only(arm):
    arm.state.usages["eastus"] = [usage("lowPriorityCores", 8)]
    (problem,) = check(arm, spot=True).problems
    assert "Total Regional Spot vCPUs" in problem and "lowPriorityCores" in problem


def test_family_name_comes_from_the_sku_api_when_it_differs_from_the_table(arm):
    arm.state.skus["eastus"] = [sku("Standard_NC24ads_A100_v4", "newFamilyName", 24)]
    arm.state.usages["eastus"] = [usage("cores", 100), usage("newFamilyName", 0)]
    (problem,) = check(arm).problems
    assert "(newFamilyName)" in problem


def test_a_size_the_region_does_not_offer_is_a_problem(arm):
    arm.state.skus["eastus"] = []
    (problem,) = check(arm).problems
    assert "eastus does not offer Standard_NC24ads_A100_v4" in problem


def test_a_size_restricted_for_this_subscription_is_a_problem(arm):
    arm.state.skus["eastus"] = [
        sku("Standard_NC24ads_A100_v4", "StandardNCADSA100v4Family", 24, restricted=True)
    ]
    (problem,) = check(arm).problems
    assert "not available to this subscription" in problem and "NotAvailableForSubscription" in (
        problem
    )


def test_contributor_alone_cannot_assign_roles(arm):
    arm.state.permissions = [
        {
            "actions": ["*"],
            "notActions": [
                "Microsoft.Authorization/*/Delete",
                "Microsoft.Authorization/*/Write",
                "Microsoft.Authorization/elevateAccess/Action",
            ],
        }
    ]
    (problem,) = check(arm).problems
    assert "may not Microsoft.Authorization/roleAssignments/write" in problem
    assert "User Access Administrator" in problem


def test_contributor_plus_user_access_administrator_is_enough(arm):
    arm.state.permissions = [
        {"actions": ["*"], "notActions": ["Microsoft.Authorization/*/Write"]},
        {"actions": ["*/read", "Microsoft.Authorization/*"], "notActions": []},
    ]
    assert check(arm).problems == []


def test_a_subscription_without_budgets_is_told_so(arm):
    arm.state.budgets_error = (400, "BadRequest")
    (problem,) = check(arm).problems
    assert "cannot hold a Cost Management budget" in problem


def test_without_a_chosen_subscription_a_single_one_is_used(arm):
    assert check(arm, subscription=None).problems == []


def test_several_subscriptions_and_none_chosen_asks_to_choose(arm):
    arm.state.subscriptions.append("00000000-0000-0000-0000-00000000sub2")
    (problem,) = check(arm, subscription=None).problems
    assert "azure-native:subscriptionId" in problem


def test_a_token_arm_refuses_is_a_login_problem(arm):
    arm.state.subscriptions = []
    arm.close()
    (problem,) = check(arm, subscription=None).problems
    assert "Azure credentials do not work" in problem and "az login" in problem


@pytest.mark.parametrize(
    ("action", "permissions", "granted"),
    [
        ("Microsoft.Compute/virtualMachines/write", [{"actions": ["*"]}], True),
        ("Microsoft.Compute/virtualMachines/write", [{"actions": ["Microsoft.Compute/*"]}], True),
        ("Microsoft.Compute/virtualMachines/write", [{"actions": ["*/read"]}], False),
        (
            "Microsoft.Authorization/roleAssignments/write",
            [{"actions": ["*"], "notActions": ["Microsoft.Authorization/*/Write"]}],
            False,
        ),
    ],
)
def test_arm_permission_wildcards_match_as_azure_matches_them(action, permissions, granted):
    assert preflight_azure.allowed(action, permissions) is granted


def _fab_preflight(stack_file: Path, home: Path) -> subprocess.CompletedProcess:
    """`fab preflight` with nobody logged in to Azure (no AZURE_*, no az login, no
    token cache) and the ARM endpoint on a port where nothing listens."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "ARM_"))}
    env.update(HOME=str(home), AZURE_CONFIG_DIR=str(home / ".azure"))
    env[ARM_ENDPOINT_ENV] = "http://127.0.0.1:9"
    return subprocess.run(
        [str(FAB), "preflight", "--config-file", str(stack_file)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fab_preflight_of_the_example_stack_names_its_placeholders(tmp_path):
    result = _fab_preflight(REPO / "Pulumi.azure-example.yaml", tmp_path)
    assert result.returncode == 1
    problems = [line for line in result.stderr.splitlines() if line.startswith("  ")]
    assert [problem.split(": ")[1].split()[0] for problem in problems] == [
        "sshPublicKey",
        "sshAllowedCidr",
        "alertEmails",
    ]
    assert result.stderr.strip().splitlines()[-1] == (
        "3 problem(s): `pulumi up` of stack azure-example would fail"
    )


def test_fab_preflight_without_azure_credentials_is_one_finding_without_the_sdks_list(tmp_path):
    stack = {**STACK, "glucose-training:alertEmails": ["me@lab.dev"]}
    stack_file = tmp_path / "Pulumi.dev.yaml"
    stack_file.write_text(yaml.safe_dump({"config": stack}))
    result = _fab_preflight(stack_file, tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "  1. no Azure credentials (DefaultAzureCredential failed to retrieve a token from the "
        "included credentials.); fix: run `az login` (or set AZURE_* for a service principal), "
        "then retry",
        "1 problem(s): `pulumi up` of stack dev would fail",
    ]
