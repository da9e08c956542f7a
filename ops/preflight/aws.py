"""`fab preflight` on AWS: will this stack's `pulumi up` succeed with these credentials?

Read-only calls with the deployer's own credentials (boto3's default chain, the
stack's region): who am I, does the region sell the size, do the GPU vCPU quota
leave room for `nodeCount` more boxes and the Elastic IP quota for one more address
(box 0's: the others have none), may I create what the
program declares, and may I manage budgets. Every problem comes back as one line
ending in its fix. boto3 honours AWS_ENDPOINT_URL(_<SERVICE>), which is how the tests
point it at moto and at a local fake of the APIs moto lacks.
"""

from __future__ import annotations

from typing import Any

from ops.preflight.findings import Findings
from stack import quota

# What `pulumi up` does with the deployer's identity (a representative action per
# resource kind; IAM's policy simulator answers for each).
REQUIRED_ACTIONS = (
    "ec2:CreateVpc",
    "ec2:RunInstances",
    "ec2:AllocateAddress",
    "ec2:CreateTags",
    "ec2:CancelSpotInstanceRequests",
    "iam:CreateRole",
    "iam:PutRolePolicy",
    "iam:AttachRolePolicy",
    "iam:PassRole",
    "iam:CreateInstanceProfile",
    "s3:CreateBucket",
    "ecr:CreateRepository",
    "scheduler:CreateSchedule",
    "cloudwatch:PutMetricAlarm",
    "budgets:ModifyBudget",
    "budgets:CreateBudgetAction",
    "ce:UpdateCostAllocationTagsStatus",
)
LIVE_INSTANCE_STATES = ("pending", "running", "stopping", "stopped")
# One per stack whatever nodeCount: only box 0 has one (pulumi/infra/aws/training_box.py).
ELASTIC_IPS_PER_STACK = 1
COST_SCOPE_TAG = "cost-scope"


def check(config: Any, session: Any) -> Findings:
    """Every problem a `pulumi up` of `config` (an infra StackConfig) would meet."""
    from botocore.exceptions import BotoCoreError, ClientError

    findings = Findings()
    try:
        identity = session.client("sts").get_caller_identity()
    except (BotoCoreError, ClientError) as error:
        findings.problem(
            f"AWS credentials do not work ({_reason(error)})",
            "run `aws configure` or `aws sso login` (or set AWS_PROFILE), then retry",
        )
        return findings
    findings.note(f"AWS account {identity['Account']} as {identity['Arn']}, {config.region}")
    ec2 = session.client("ec2")
    for step in (_size_offered, _ami_exists, _gpu_quota, _elastic_ips):
        _guarded(step, findings, config, session, ec2)
    _guarded(_deployer_rights, findings, config, session, identity["Arn"])
    _guarded(_budgets, findings, config, session, identity["Account"])
    return findings


def _guarded(step, findings: Findings, *args) -> None:
    """Run one check; an API that refuses to answer is itself a finding, not a crash."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        step(findings, *args)
    except (BotoCoreError, ClientError) as error:
        what = step.__name__.strip("_").replace("_", " ")
        findings.note(f"could not check {what}: {_reason(error)}")


def _reason(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    return f"{code}: {response['Error'].get('Message', '')}".strip() if code else str(error)


def _size_offered(findings: Findings, config: Any, _session: Any, ec2: Any) -> None:
    offerings = ec2.describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [config.vm_size]}],
    )["InstanceTypeOfferings"]
    if not offerings:
        findings.problem(
            f"no availability zone of {config.region} sells {config.vm_size} to this account",
            "pick another aws:region or vmSize (`fab plan --cloud aws` lists the options)",
        )


def _ami_exists(findings: Findings, config: Any, _session: Any, ec2: Any) -> None:
    if not config.ami_id:
        return
    images = ec2.describe_images(Filters=[{"Name": "image-id", "Values": [config.ami_id]}])
    if not images["Images"]:
        findings.problem(
            f"amiId {config.ami_id} does not exist in {config.region} for this account",
            "unset glucose-training:amiId to look the AMI up again, or copy the image here",
        )


def _gpu_quota(findings: Findings, config: Any, session: Any, ec2: Any) -> None:
    wanted = quota.aws_gpu_quota(config.size, config.spot, config.region, config.node_count)
    limit = _quota_value(session, wanted.name)
    family = config.vm_size[0].lower()
    used = sum(
        vcpus
        for instance, vcpus in _live_instances(ec2, config)
        if _quota_family(instance["InstanceType"]) == family
        and (instance.get("InstanceLifecycle") == "spot") == config.spot
    )
    need = quota.vcpus_needed(config.size, config.node_count)
    findings.problem_if(quota.shortfall(wanted, limit, used, need))


def _elastic_ips(findings: Findings, config: Any, session: Any, ec2: Any) -> None:
    wanted = quota.aws_elastic_ip_quota(config.region)
    limit = _quota_value(session, wanted.name, default=quota.AWS_DEFAULT_ELASTIC_IPS)
    addresses = ec2.describe_addresses()["Addresses"]
    used = sum(1 for a in addresses if _tag(a, COST_SCOPE_TAG) != config.cost_scope)
    findings.problem_if(quota.shortfall(wanted, limit, used, ELASTIC_IPS_PER_STACK))


def _quota_value(session: Any, code: str, default: float | None = None) -> float:
    from botocore.exceptions import ClientError

    client = session.client("service-quotas")
    try:
        return float(client.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except ClientError as error:
        # A quota never raised has no applied value in some accounts: AWS's default holds.
        if error.response["Error"]["Code"] != "NoSuchResourceException":
            raise
        if default is not None:
            return default
        return float(
            client.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"][
                "Value"
            ]
        )


def _quota_family(instance_type: str) -> str:
    """`p` or `g` (G and VT share a quota) for GPU families, else ''."""
    prefix = instance_type[:2].lower()
    if prefix == "vt":
        return "g"
    return instance_type[0].lower() if instance_type[:1].lower() in "pg" else ""


def _live_instances(ec2: Any, config: Any) -> list[tuple[dict, int]]:
    """(instance, vCPUs) of every live instance in the region but this stack's own."""
    instances = [
        instance
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)}]
        )
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
        if _tag(instance, COST_SCOPE_TAG) != config.cost_scope
    ]
    types = sorted({i["InstanceType"] for i in instances})
    vcpus: dict[str, int] = {}
    if types:
        for info in ec2.describe_instance_types(InstanceTypes=types)["InstanceTypes"]:
            vcpus[info["InstanceType"]] = info["VCpuInfo"]["DefaultVCpus"]
    return [(i, vcpus.get(i["InstanceType"], 0)) for i in instances]


def _tag(resource: dict, key: str) -> str | None:
    return next((t["Value"] for t in resource.get("Tags", []) if t["Key"] == key), None)


def _deployer_rights(findings: Findings, config: Any, session: Any, arn: str) -> None:
    principal = _principal_arn(session, arn)
    if principal is None:
        return  # the account root may do everything
    results = session.client("iam").simulate_principal_policy(
        PolicySourceArn=principal, ActionNames=list(REQUIRED_ACTIONS)
    )["EvaluationResults"]
    denied = [r["EvalActionName"] for r in results if r["EvalDecision"] != "allowed"]
    if denied:
        findings.problem(
            f"{principal} may not {', '.join(denied)}",
            "attach a policy that allows them (AdministratorAccess, or PowerUserAccess plus "
            "IAM role management; docs/account.md lists them)",
        )


def _principal_arn(session: Any, arn: str) -> str | None:
    """The IAM user or role behind a caller ARN (an assumed-role session names its role)."""
    service, resource = arn.split(":", 5)[2], arn.split(":", 5)[5]
    if resource == "root":
        return None
    if service == "sts" and resource.startswith("assumed-role/"):
        role_name = resource.split("/")[1]
        return session.client("iam").get_role(RoleName=role_name)["Role"]["Arn"]
    return arn


def _budgets(findings: Findings, config: Any, session: Any, account: str) -> None:
    from botocore.exceptions import ClientError

    try:
        session.client("budgets").describe_budgets(AccountId=account, MaxResults=1)
    except ClientError as error:
        findings.problem(
            f"this identity cannot use AWS Budgets ({_reason(error)})",
            "allow budgets:ViewBudget and budgets:ModifyBudget; in an AWS Organizations "
            "member account, the management account must not deny Budgets",
        )
    if config.activate_cost_allocation_tag:
        _cost_allocation_tag(findings, session)


def _cost_allocation_tag(findings: Findings, session: Any) -> None:
    from botocore.exceptions import ClientError

    try:
        tags = session.client("ce").list_cost_allocation_tags(TagKeys=[COST_SCOPE_TAG])[
            "CostAllocationTags"
        ]
    except ClientError as error:
        findings.problem(
            f"this account cannot activate cost-allocation tags ({_reason(error)}), so the "
            f"budget would count nothing",
            f"in a linked account, ask the payer account to activate user:{COST_SCOPE_TAG} "
            "and set `pulumi config set glucose-training:activateCostAllocationTag false`",
        )
        return
    status = next((t["Status"] for t in tags if t["TagKey"] == COST_SCOPE_TAG), None)
    if status != "Active":
        findings.note(
            f"cost-allocation tag {COST_SCOPE_TAG!r} is {status or 'not yet known to Billing'}: "
            "`pulumi up` activates it once Billing has seen it (up to a day after the first "
            "tagged box); the budget counts this stack from then on"
        )
