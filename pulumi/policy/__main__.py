"""The glucose-training policy pack: `pulumi up --policy-pack pulumi/policy`.

The rules live in `policies.py` (importable and testable without the engine); this
file only serves them to the Pulumi CLI, which runs it with this directory first on
sys.path.
"""

from policies import POLICIES
from pulumi_policy import PolicyPack

PolicyPack(
    name="glucose-training-guard-rails",
    description=(
        "GPU boxes that cannot quietly burn money: daily stop, budget, no public SSH or "
        "storage, IMDSv2, key-only SSH; advice on spot and destroy-time data loss."
    ),
    policies=POLICIES,
)
