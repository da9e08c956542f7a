"""The AWS training box, run under Pulumi's mocks: what would reach AWS, property by property."""

from __future__ import annotations

import base64
import gzip
import json

import pulumi
import pytest
import yaml

from box import contract
from box.watchdog_config import WatchdogConfig
from infra.aws import access as aws_iam
from infra.aws import guard_rails as aws_guard_rails
from infra.aws import network as aws_network
from infra.aws import storage as aws_storage
from infra.aws import training_box as aws
from stack import box_packing, catalog, storage_layout
from stack.cloud_init import ProgramsSource, box_storage_settings, render_cloud_init
from stack.config import validate
from tests.fakes.aws_program import (
    ACCOUNT_ID,
    AMI_ID,
    AMI_ROOT_GB,
    GOOD_CONFIG,
    REGION,
    STACK,
    ZONES,
    aws_recorder,
    offerings_in,
    run_stack,
    stack_settings,
)
from tests.fakes.pulumi_mocks import RunResult, is_secret, main_program, run_program, unwrap
from tests.paths import REPO

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"
SUBNET = "aws:ec2/subnet:Subnet"
BUCKET = "aws:s3/bucket:Bucket"
SCHEDULE = "aws:scheduler/schedule:Schedule"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
TOPIC = "aws:sns/topic:Topic"
PROGRAMS_OBJECT = "aws:s3/bucketObjectv2:BucketObjectv2"
# Resource types AWS gives no tags to.
UNTAGGED_TYPES = {
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    ROLE_POLICY,
    SCHEDULE,
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:costexplorer/costAllocationTag:CostAllocationTag",
    BOXES,  # tagged by its launch template
    "aws:sns/topicSubscription:TopicSubscription",
}
BUCKET_TYPES = {
    BUCKET,
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
}


@pytest.fixture(scope="module")
def box() -> RunResult:
    return run_stack()


@pytest.fixture(scope="module")
def spot_pair() -> RunResult:
    return run_stack(spot="true", nodeCount="2")


def _policy(result: RunResult, name: str) -> dict:
    return json.loads(result.named(name).inputs["policy"])


def _role_trust(result: RunResult, name: str) -> dict:
    return json.loads(result.named(name).inputs["assumeRolePolicy"])


# --- network ---------------------------------------------------------------------------


def test_vpc_is_our_own_with_a_subnet_per_zone_routed_to_an_internet_gateway(box):
    vpc = box.one("aws:ec2/vpc:Vpc")
    gateway = box.one("aws:ec2/internetGateway:InternetGateway")
    routes = box.one("aws:ec2/routeTable:RouteTable")
    associations = box.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")
    assert vpc.inputs["cidrBlock"] == aws_network.VPC_CIDR
    assert gateway.inputs["vpcId"] == vpc.id
    assert routes.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0", "gatewayId": gateway.id}]
    assert sorted(a.inputs["subnetId"] for a in associations) == sorted(
        s.id for s in box.of_type(SUBNET)
    )
    assert {a.inputs["routeTableId"] for a in associations} == {routes.id}


def test_every_zone_selling_the_size_gets_a_subnet_numbered_by_its_letter(box):
    _, args = next(c for c in box.calls if "getInstanceTypeOfferings" in c[0])
    assert args["filters"] == [{"name": "instance-type", "values": ["g5.xlarge"]}]
    assert args["locationType"] == "availability-zone"
    subnets = {s.inputs["availabilityZone"]: s for s in box.of_type(SUBNET)}
    assert sorted(subnets) == sorted(ZONES)
    assert subnets["us-east-1a"].inputs["cidrBlock"] == "10.42.16.0/24"
    assert subnets["us-east-1d"].inputs["cidrBlock"] == "10.42.19.0/24"
    assert all(s.inputs["mapPublicIpOnLaunch"] is True for s in subnets.values())
    assert subnets["us-east-1c"].name == "glucose-subnet-us-east-1c"


def test_a_region_without_the_instance_type_fails_naming_size_and_region():
    recorder = aws_recorder()
    recorder._calls["aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"] = offerings_in([])
    with pytest.raises(Exception, match=r"no availability zone in us-east-1 offers g5\.xlarge"):
        run_stack(recorder)


def test_security_group_admits_ssh_only_from_the_allowed_cidr(box):
    group = box.one(SECURITY_GROUP)
    assert group.inputs["ingress"] == [
        {
            "description": "SSH from sshAllowedCidr only",
            "protocol": "tcp",
            "fromPort": 22,
            "toPort": 22,
            "cidrBlocks": ["198.18.0.7/32"],
        }
    ]
    assert group.inputs["vpcId"] == box.one("aws:ec2/vpc:Vpc").id


def test_security_group_allows_all_egress(box):
    egress = box.one(SECURITY_GROUP).inputs["egress"]
    assert egress == [{"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}]


def test_key_pair_holds_the_configured_public_key(box):
    assert box.one("aws:ec2/keyPair:KeyPair").inputs["publicKey"] == GOOD_CONFIG["sshPublicKey"]


# --- the instance ----------------------------------------------------------------------


def test_ami_is_the_newest_deep_learning_base_ami_looked_up_by_owner_and_name(box):
    _, args = next(c for c in box.calls if "getAmi" in c[0])
    assert args["owners"] == ["amazon"]
    assert args["mostRecent"] is True
    name_filter = next(f for f in args["filters"] if f["name"] == "name")
    assert name_filter["values"] == [
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
    ]
    assert box.one(TEMPLATE).inputs["imageId"] == AMI_ID
    # The root disk is the AMI's own root device.
    assert box.one(TEMPLATE).inputs["blockDeviceMappings"][0]["deviceName"] == "/dev/sda1"


def test_a_disk_smaller_than_the_looked_up_amis_root_snapshot_fails_before_any_box():
    with pytest.raises(Exception, match="osDiskSizeGb: 64 GB is smaller than the root snapshot"):
        run_stack(osDiskSizeGb="64")


def test_a_disk_as_big_as_the_amis_root_snapshot_boots_it():
    box = run_stack(osDiskSizeGb=str(AMI_ROOT_GB))
    root = box.one(TEMPLATE).inputs["blockDeviceMappings"][0]["ebs"]
    assert root["volumeSize"] == AMI_ROOT_GB


def test_volta_sizes_boot_canonical_ubuntu_because_the_oss_driver_skips_volta():
    result = run_stack(vmSize="p3.2xlarge")
    _, args = next(c for c in result.calls if "getAmi" in c[0])
    assert args["owners"] == [aws.UBUNTU_OWNER]
    assert [f["values"] for f in args["filters"] if f["name"] == "name"] == [[aws.UBUNTU_NAME]]


def test_imdsv2_is_required_with_a_hop_limit_a_container_can_use(box):
    options = box.one(TEMPLATE).inputs["metadataOptions"]
    assert options["httpTokens"] == "required"
    assert options["httpPutResponseHopLimit"] == 2
    assert options["httpEndpoint"] == "enabled"


def test_an_os_shutdown_stops_rather_than_terminates(box):
    assert box.one(TEMPLATE).inputs["instanceInitiatedShutdownBehavior"] == "stop"


def test_root_volume_is_encrypted_gp3_of_the_configured_size(box):
    (root,) = box.one(TEMPLATE).inputs["blockDeviceMappings"]
    # The launch template's flags are text in pulumi-aws ("true"), booleans to EC2.
    assert root["ebs"] == {
        "volumeType": "gp3",
        "volumeSize": 200,
        "encrypted": "true",
        "deleteOnTermination": "true",
    }


def test_the_launch_template_holds_no_market_the_candidates_do(box, spot_pair):
    assert "instanceMarketOptions" not in box.one(TEMPLATE).inputs
    assert {c["market"] for c in box.one(BOXES).inputs["candidates"]} == {"on-demand"}
    assert {c["market"] for c in spot_pair.one(BOXES).inputs["candidates"]} == {"spot"}


def test_candidates_are_size_then_zone_in_the_stacks_order():
    result = run_stack(
        vmSize="g6.xlarge", fallbackVmSizes='["g5.xlarge"]', zones='["us-east-1c", "us-east-1a"]'
    )
    assert [(c["size"], c["zone"]) for c in result.one(BOXES).inputs["candidates"]] == [
        ("g6.xlarge", "us-east-1c"),
        ("g6.xlarge", "us-east-1a"),
        ("g5.xlarge", "us-east-1c"),
        ("g5.xlarge", "us-east-1a"),
    ]
    # One subnet in each zone a candidate may go to, and none in the other zones.
    assert sorted(s.inputs["availabilityZone"] for s in result.of_type(SUBNET)) == [
        "us-east-1a",
        "us-east-1c",
    ]


def test_a_zone_that_does_not_sell_a_size_is_dropped_with_its_reason_before_anything():
    recorder = aws_recorder()
    sold = {"g6.xlarge": ["us-east-1a"], "g5.xlarge": ["us-east-1a", "us-east-1c"]}
    recorder._calls["aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"] = offerings_in(
        ZONES, sold
    )
    result = run_stack(recorder, vmSize="g6.xlarge", fallbackVmSizes="g5.xlarge")
    boxes = result.one(BOXES).inputs
    assert [(c["size"], c["zone"]) for c in boxes["candidates"]] == [
        ("g6.xlarge", "us-east-1a"),
        ("g5.xlarge", "us-east-1a"),
        ("g5.xlarge", "us-east-1c"),
    ]
    # us-east-1d sells neither: no candidate, no subnet there.
    assert boxes["dropped"] == [
        {"size": "g6.xlarge", "zone": "us-east-1c", "market": "on-demand", "refusal": NOT_SOLD}
    ]
    assert "us-east-1d" not in boxes["subnets"]


def test_spot_fallback_tries_every_spot_pool_before_on_demand():
    result = run_stack(spot="true", spotFallback="true", zones="us-east-1a")
    assert [c["market"] for c in result.one(BOXES).inputs["candidates"]] == ["spot", "on-demand"]


def test_reordering_fallbacks_and_zones_replaces_nothing():
    from infra.aws.boxes import REPLACING_INPUTS

    assert set(REPLACING_INPUTS) == {"launchTemplateId", "count", "pinnedImageId", "region"}
    first = run_stack(fallbackVmSizes="g6.xlarge,g5.2xlarge", zones="us-east-1a,us-east-1c")
    second = run_stack(fallbackVmSizes="g5.2xlarge,g6.xlarge", zones="us-east-1c,us-east-1a")
    assert sorted(s.name for s in first.of_type(SUBNET)) == sorted(
        s.name for s in second.of_type(SUBNET)
    )
    assert {s.name: s.inputs for s in first.of_type(SUBNET)} == {
        s.name: s.inputs for s in second.of_type(SUBNET)
    }


def test_user_data_is_the_shared_cloud_init_pointing_at_the_programs_in_the_bucket(box):
    programs = box_packing.build_programs()
    packed = base64.b64decode(box.one(TEMPLATE).inputs["userData"])
    settings = box_packing.settings_text(
        "aws",
        {"notify_topic_arn": box.one(TOPIC).outputs["arn"], "first_choice": "g5.xlarge on-demand"},
        # Where the box stores a failed run's end (box/stored_end.py).
        box_storage_settings("aws", box.exports["storageUri"], REGION),
        idle_shutdown_minutes=45,
        daily_stop_time="21:30",
        daily_stop_time_zone="Europe/Berlin",
    )
    source = ProgramsSource(
        cloud="aws",
        ssh_user="ubuntu",
        storage=box.exports["storageUri"],
        key=storage_layout.box_programs_key(programs.sha256),
        sha256=programs.sha256,
        region=REGION,
    )
    assert gzip.decompress(packed).decode() == render_cloud_init(source, settings)


def test_the_programs_are_in_the_bucket_before_any_box_boots(spot_pair):
    programs = box_packing.build_programs()
    archive = spot_pair.one(PROGRAMS_OBJECT)
    assert archive.inputs["bucket"] == spot_pair.one(BUCKET).id
    assert archive.inputs["key"] == storage_layout.box_programs_key(programs.sha256)
    assert archive.inputs["content"] == programs.text
    for launched in (spot_pair.one(BOXES), spot_pair.one(TEMPLATE)):
        assert archive.urn in launched.dependencies, launched.name


def test_an_old_build_of_the_programs_stays_for_the_boxes_that_pin_it(box):
    # Its key changes with the programs: Pulumi replaces it, and the old one is kept.
    assert box.one(PROGRAMS_OBJECT).retain_on_delete


def test_the_template_and_the_boxes_are_wired_to_subnets_group_key_and_profile(box):
    template = box.one(TEMPLATE).inputs
    assert template["vpcSecurityGroupIds"] == [box.one(SECURITY_GROUP).id]
    assert template["keyName"] == box.one("aws:ec2/keyPair:KeyPair").outputs["keyName"]
    profile = box.one("aws:iam/instanceProfile:InstanceProfile")
    assert template["iamInstanceProfile"] == {"name": profile.name}
    assert "instanceType" not in template  # a candidate's
    boxes = box.one(BOXES).inputs
    assert boxes["launchTemplateId"] == box.one(TEMPLATE).id
    assert boxes["launchTemplateVersion"] == "1"
    assert boxes["subnets"] == {s.inputs["availabilityZone"]: s.id for s in box.of_type(SUBNET)}
    assert (boxes["count"], boxes["region"], boxes["namePrefix"]) == (1, REGION, "glucose-box")


def test_the_boxes_tag_what_they_launch_with_the_stacks_own_tags(box):
    # In the launch request too: a spot request and a box it relaunches carry them.
    (instance_tags,) = [
        t["tags"] for t in box.one(TEMPLATE).inputs["tagSpecifications"]
        if t["resourceType"] == "instance"
    ]  # fmt: skip
    assert box.one(BOXES).inputs["tags"] == instance_tags
    assert instance_tags["cost-scope"] == "glucose-training/test"


def test_only_box_0_gets_an_elastic_ip_after_the_gateway(spot_pair):
    # AWS's default quota is 5 Elastic IPs a region: one per stack, whatever nodeCount.
    address = spot_pair.one("aws:ec2/eip:Eip")
    gateway = spot_pair.one("aws:ec2/internetGateway:InternetGateway")
    ids = spot_pair.one(BOXES).outputs["instanceIds"]
    assert (address.name, address.inputs["instance"], address.inputs["domain"]) == (
        "glucose-ip-0",
        ids[0],
        "vpc",
    )
    assert gateway.urn in address.dependencies


# --- storage and registry --------------------------------------------------------------


def test_bucket_blocks_every_kind_of_public_access(box):
    block = box.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert block["bucket"] == box.one(BUCKET).id
    flags = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    assert all(block[flag] is True for flag in flags)


def test_bucket_is_encrypted_by_default(box):
    encryption = box.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs
    assert encryption["bucket"] == box.one(BUCKET).id
    assert encryption["rules"] == [
        {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}
    ]


def test_bucket_is_versioned(box):
    versioning = box.one("aws:s3/bucketVersioning:BucketVersioning").inputs
    assert versioning["versioningConfiguration"] == {"status": "Enabled"}


def test_lifecycle_expires_temporaries_partial_uploads_and_old_versions(box):
    rules = {
        rule["id"]: rule
        for rule in box.one(
            "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
        ).inputs["rules"]
    }
    assert rules["expire-stale-temporaries"]["filter"] == {"prefix": "tmp/"}
    assert rules["expire-stale-temporaries"]["expiration"] == {
        "days": storage_layout.STALE_TMP_DAYS
    }
    multipart = rules["abort-incomplete-multipart-uploads"]["abortIncompleteMultipartUpload"]
    assert multipart == {"daysAfterInitiation": 1}
    old = rules["expire-noncurrent-versions"]["noncurrentVersionExpiration"]
    assert old == {"noncurrentDays": aws_storage.NONCURRENT_VERSION_DAYS}
    assert all(rule["status"] == "Enabled" for rule in rules.values())


def test_by_default_destroy_deletes_the_bucket_even_with_checkpoints_in_it(box):
    bucket = box.one(BUCKET)
    assert bucket.inputs["forceDestroy"] is True
    assert bucket.inputs["tags"]["keep-on-destroy"] == "false"
    assert {r.type for r in box.resources if r.retain_on_delete} == {PROGRAMS_OBJECT}


def test_keep_storage_on_destroy_retains_the_bucket_and_all_its_settings():
    result = run_stack(keepStorageOnDestroy="true")
    assert result.one(BUCKET).inputs["forceDestroy"] is False
    assert result.one(BUCKET).inputs["tags"]["keep-on-destroy"] == "true"
    retained = {r.type for r in result.resources if r.retain_on_delete}
    assert retained == BUCKET_TYPES | {PROGRAMS_OBJECT}


def test_ecr_repository_scans_every_push_and_goes_with_the_stack(box):
    repository = box.one("aws:ecr/repository:Repository").inputs
    assert repository["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repository["forceDelete"] is True


def test_ecr_repository_name_is_left_to_pulumi_so_stacks_never_clash(box):
    # No `name`: Pulumi adds a random suffix to glucose-trainer (docs/stack-config.md's
    # outputs table).
    repository = box.one("aws:ecr/repository:Repository")
    assert repository.name == "glucose-trainer"
    assert "name" not in repository.inputs


# --- IAM -------------------------------------------------------------------------------


def test_box_role_is_assumable_by_ec2_only(box):
    trust = _role_trust(box, "glucose-box-role")
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "ec2.amazonaws.com"}]
    profile = box.one("aws:iam/instanceProfile:InstanceProfile")
    assert profile.inputs["role"] == box.named("glucose-box-role").name


def test_box_may_touch_only_its_bucket_and_pull_only_its_repository(box):
    statements = {s["Sid"]: s for s in _policy(box, "glucose-box-access")["Statement"]}
    bucket_arn = box.one(BUCKET).outputs["arn"]
    repository_arn = box.one("aws:ecr/repository:Repository").outputs["arn"]
    assert statements["ListThisBucket"]["Resource"] == [bucket_arn]
    assert statements["ReadWriteThisBucket"]["Resource"] == [f"{bucket_arn}/*"]
    # The trainer uploads with the role, and the box reads and writes a failed run's
    # runs/<id>/status.json with it (box/stored_end.py).
    assert {"s3:GetObject", "s3:PutObject"} <= set(statements["ReadWriteThisBucket"]["Action"])
    assert statements["PullThisRepository"]["Resource"] == [repository_arn]
    assert not any(a.startswith("ecr:Put") for a in statements["PullThisRepository"]["Action"])
    assert box.named("glucose-box-access").inputs["role"] == box.named("glucose-box-role").id


def test_the_alert_emails_are_subscribed_to_the_run_ends_topic(box):
    topic = box.one(TOPIC)
    subscriptions = box.of_type("aws:sns/topicSubscription:TopicSubscription")
    assert sorted((s.inputs["protocol"], s.inputs["endpoint"]) for s in subscriptions) == [
        ("email", "lab@lab.dev"),
        ("email", "me@lab.dev"),
    ]
    assert {s.inputs["topic"] for s in subscriptions} == {topic.outputs["arn"]}


def test_the_box_may_publish_to_the_run_ends_topic_and_no_other(box):
    (statement,) = _policy(box, "glucose-box-notify")["Statement"]
    assert statement["Action"] == ["sns:Publish"]
    assert statement["Resource"] == [box.one(TOPIC).outputs["arn"]]
    assert box.named("glucose-box-notify").inputs["role"] == box.named("glucose-box-role").name


def test_the_topic_reaches_the_box_settings_and_the_stack_outputs(box):
    arn = box.one(TOPIC).outputs["arn"]
    packed = base64.b64decode(box.one(TEMPLATE).inputs["userData"])
    assert f'"notify_topic_arn": "{arn}"' in gzip.decompress(packed).decode()
    assert box.exports["notifyTopicArn"] == arn
    assert "notifyWebhook" not in box.exports


def test_a_stacks_notify_webhook_reaches_the_box_settings_and_a_secret_output():
    url = "https://hooks.slack.com/services/T0/B0/secret"
    result = run_stack(notifyWebhook=url)
    user_data = result.one(TEMPLATE).inputs["userData"]
    assert is_secret(user_data), "the user data holds the webhook: a secret in the state"
    packed = base64.b64decode(unwrap(user_data))
    assert f'"notify_webhook": "{url}"' in gzip.decompress(packed).decode()
    assert result.exports["notifyWebhook"] == url


def test_a_notify_webhook_stored_in_plain_text_is_refused_in_one_line():
    url = "https://hooks.slack.com/services/T0/B0/secret"
    with pytest.raises(pulumi.RunError) as refused:
        run_program(main_program(), aws_recorder(), stack_settings(notifyWebhook=url),
                    stack=STACK, secret_keys=[])  # fmt: skip
    message = str(refused.value)
    assert "notifyWebhook: stored in plain text" in message
    assert "pulumi config set --secret glucose-training:notifyWebhook" in message
    assert "T0/B0/secret" not in message


def test_wildcard_resources_are_only_the_registry_login_and_the_namespaced_metric(box):
    wildcard = [s for s in _policy(box, "glucose-box-access")["Statement"] if s["Resource"] == "*"]
    assert [s["Action"] for s in wildcard] == [
        ["ecr:GetAuthorizationToken"],
        ["cloudwatch:PutMetricData"],
    ]
    assert wildcard[1]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": contract.VERDICT_NAMESPACE}
    }


# --- guard rails -----------------------------------------------------------------------


def test_daily_stop_runs_at_the_configured_time_in_the_configured_zone(box):
    schedule = box.one(SCHEDULE).inputs
    assert schedule["scheduleExpression"] == "cron(30 21 * * ? *)"
    assert schedule["scheduleExpressionTimezone"] == "Europe/Berlin"
    assert schedule["state"] == "ENABLED"
    assert schedule["flexibleTimeWindow"] == {"mode": "OFF"}


def test_daily_stop_calls_stop_instances_with_every_box(spot_pair):
    target = spot_pair.one(SCHEDULE).inputs["target"]
    assert target["arn"] == "arn:aws:scheduler:::aws-sdk:ec2:stopInstances"
    ids = spot_pair.one(BOXES).outputs["instanceIds"]
    assert json.loads(target["input"]) == {"InstanceIds": ids}
    assert target["roleArn"] == spot_pair.named("glucose-daily-stop-role").outputs["arn"]


def test_daily_stop_role_may_stop_these_instances_and_nothing_else(spot_pair):
    (statement,) = _policy(spot_pair, "glucose-daily-stop-access")["Statement"]
    assert statement["Action"] == ["ec2:StopInstances"]
    ids = spot_pair.one(BOXES).outputs["instanceIds"]
    assert statement["Resource"] == [f"arn:aws:ec2:{REGION}:{ACCOUNT_ID}:instance/{i}" for i in ids]
    (trust,) = _role_trust(spot_pair, "glucose-daily-stop-role")["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT_ID}}


def test_daily_stop_keeps_the_start_date_a_run_moved_it_to(box):
    assert "startDate" in box.one(SCHEDULE).ignore_changes
    assert box.exports["dailyStopSchedules"] == [box.one(SCHEDULE).outputs["name"]]


def test_midnight_and_single_digit_times_make_valid_cron():
    assert aws_guard_rails.daily_cron("00:05") == "cron(5 0 * * ? *)"
    assert aws_guard_rails.daily_cron("09:00") == "cron(0 9 * * ? *)"


def test_budget_is_monthly_in_usd_for_the_configured_amount(box):
    budget = box.one("aws:budgets/budget:Budget").inputs
    assert (budget["budgetType"], budget["timeUnit"]) == ("COST", "MONTHLY")
    assert (budget["limitAmount"], budget["limitUnit"]) == ("150.00", "USD")


def test_budget_mails_actual_50_80_100_and_forecast_100_percent(box):
    notifications = box.one("aws:budgets/budget:Budget").inputs["notifications"]
    seen = sorted((n["notificationType"], n["threshold"]) for n in notifications)
    assert seen == [("ACTUAL", 50), ("ACTUAL", 80), ("ACTUAL", 100), ("FORECASTED", 100)]
    for notification in notifications:
        assert notification["thresholdType"] == "PERCENTAGE"
        assert notification["comparisonOperator"] == "GREATER_THAN"
        assert notification["subscriberEmailAddresses"] == ["me@lab.dev", "lab@lab.dev"]


def test_budget_counts_only_what_carries_this_projects_stack_tag(box):
    # `stack$test` alone would count every project's stack called test in the account.
    filters = box.one("aws:budgets/budget:Budget").inputs["costFilters"]
    assert filters == [{"name": "TagKeyValue", "values": ["user:cost-scope$glucose-training/test"]}]
    (instance, volume) = box.one(TEMPLATE).inputs["tagSpecifications"]
    assert instance["resourceType"] == "instance"
    assert instance["tags"]["cost-scope"] == "glucose-training/test"
    assert volume == {**instance, "resourceType": "volume"}


def test_idle_alarm_stops_the_box_after_idle_minutes_of_idle_verdicts(box):
    alarm = box.one(ALARM).inputs
    assert alarm["alarmActions"] == [f"arn:aws:automate:{REGION}:ec2:stop"]
    assert alarm["dimensions"] == {"InstanceId": box.one(BOXES).outputs["instanceIds"][0]}
    # Busy is 1, idle 0: the maximum below 1 in every minute of the limit means idle.
    assert (alarm["statistic"], alarm["comparisonOperator"]) == ("Maximum", "LessThanThreshold")
    assert alarm["threshold"] == 1
    assert alarm["period"] * alarm["evaluationPeriods"] == 45 * 60
    assert alarm["datapointsToAlarm"] == alarm["evaluationPeriods"]


def test_idle_alarm_takes_a_missing_verdict_for_idle(box):
    # A dead watchdog is a stop within idleShutdownMinutes, not a silent forever.
    assert box.one(ALARM).inputs["treatMissingData"] == "breaching"


def test_idle_alarm_watches_the_verdict_the_watchdog_publishes(box):
    published = WatchdogConfig(cloud="aws", idle_shutdown_minutes=45)
    alarm = box.one(ALARM).inputs
    assert (alarm["namespace"], alarm["metricName"]) == (
        published.cloudwatch_namespace,
        published.cloudwatch_metric,
    )
    assert alarm["dimensions"].keys() == {contract.VERDICT_DIMENSION}


# --- several boxes ---------------------------------------------------------------------


def test_one_box_has_no_placement_group_and_no_node_to_node_group(box):
    assert box.of_type("aws:ec2/placementGroup:PlacementGroup") == []
    assert "placement" not in box.one(TEMPLATE).inputs
    assert len(box.one(SECURITY_GROUP).inputs["ingress"]) == 1
    assert box.exports["privateHosts"] == ["10.42.16.4"]


def test_two_boxes_share_a_cluster_placement_group(spot_pair):
    group = spot_pair.one("aws:ec2/placementGroup:PlacementGroup")
    assert group.inputs["strategy"] == "cluster"
    assert spot_pair.one(TEMPLATE).inputs["placement"] == {"groupName": group.outputs["name"]}
    assert spot_pair.one(BOXES).inputs["count"] == 2


def test_two_boxes_reach_each_other_on_any_tcp_port_and_nothing_else_reaches_box_1(spot_pair):
    nodes, ssh = spot_pair.of_type(SECURITY_GROUP)
    assert (nodes.name, ssh.name) == ("glucose-nodes", "glucose-ssh")
    assert nodes.inputs["ingress"] == [
        {
            "description": "torchrun, NCCL, gloo and SSH between the boxes of this stack",
            "protocol": "tcp",
            "fromPort": 0,
            "toPort": 65535,
            "self": True,
        }
    ]
    assert [rule["cidrBlocks"] for rule in ssh.inputs["ingress"]] == [["198.18.0.7/32"]]
    assert spot_pair.one(TEMPLATE).inputs["vpcSecurityGroupIds"] == [ssh.id, nodes.id]
    # Box 1 leaves the SSH group once launched (stack/ec2_launch.py).
    assert spot_pair.one(BOXES).inputs["groups"] == [[ssh.id, nodes.id], [nodes.id]]


def test_two_boxes_each_get_an_idle_alarm(spot_pair):
    dimensions = [a.inputs["dimensions"] for a in spot_pair.of_type(ALARM)]
    ids = spot_pair.one(BOXES).outputs["instanceIds"]
    assert dimensions == [{"InstanceId": i} for i in ids]


def test_hosts_is_box_0s_public_address_and_private_hosts_every_box_in_rank_order(spot_pair):
    assert spot_pair.exports["hosts"] == [spot_pair.one("aws:ec2/eip:Eip").outputs["publicIp"]]
    private = spot_pair.one(BOXES).outputs["privateIps"]
    assert spot_pair.exports["privateHosts"] == private == ["10.42.16.4", "10.42.16.5"]


# --- everything ------------------------------------------------------------------------


def test_every_taggable_resource_carries_project_stack_and_owner(box):
    expected = {
        "project": "glucose-training",
        "stack": "test",
        "cost-scope": "glucose-training/test",
        "owner": "alice",
    }
    for resource in box.custom:
        if resource.type in UNTAGGED_TYPES:
            continue
        tags = unwrap(resource.inputs.get("tags", {}))
        assert expected.items() <= tags.items(), f"{resource.name} tags: {tags}"
    for spec in box.one(TEMPLATE).inputs["tagSpecifications"]:
        assert unwrap(spec["tags"]) == expected


def test_every_resource_is_a_child_of_the_component_named_after_it(box):
    component = box.one("glucose-training:aws:TrainingBox")
    for resource in box.custom:
        assert resource.parent == component.urn, resource.name
        assert resource.name.startswith("glucose-"), resource.name


def test_program_exports_the_design_outputs_for_aws(box):
    size = catalog.lookup("g5.xlarge", "aws")
    assert box.exports == {
        "cloud": "aws",
        "vmSize": "g5.xlarge",
        "gpuCount": 1,
        "hourlyPriceUsd": size.on_demand_usd_per_hour,
        "spot": False,
        "hosts": ["198.51.100.10"],
        "privateHosts": ["10.42.16.4"],
        "boxIds": box.one(BOXES).outputs["instanceIds"],
        "region": REGION,
        "sshUser": "ubuntu",
        "storageUri": "s3://glucose-storage-0a1b2c3",
        "registry": f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com",
        "imageRepository": f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/glucose-trainer",
        "idleShutdownMinutes": 45,
        "hungTrainerMinutes": 120,
        "peerWaitMinutes": 30,
        "autoShutdownTime": "21:30",
        "autoShutdownTimeZone": "Europe/Berlin",
        "maxRunHours": 72,
        "autoRecover": False,
        "amiId": AMI_ID,
        "dailyStopSchedules": [box.one(SCHEDULE).outputs["name"]],
        "notifyTopicArn": box.one(TOPIC).outputs["arn"],
        "placement": {"size": "g5.xlarge", "zone": "us-east-1a", "market": "on-demand"},
        "placementTried": [
            {"size": "g5.xlarge", "zone": "us-east-1a", "market": "on-demand", "refusal": ""},
            {**{"size": "g5.xlarge", "zone": "us-east-1c", "market": "on-demand"}, "refusal": NT},
            {**{"size": "g5.xlarge", "zone": "us-east-1d", "market": "on-demand"}, "refusal": NT},
        ],
        "capacityWaitMinutes": 5,
    }


def test_spot_stack_exports_the_catalog_spot_price(spot_pair):
    assert (
        spot_pair.exports["hourlyPriceUsd"] == catalog.lookup("g5.xlarge", "aws").spot_usd_per_hour
    )
    assert spot_pair.exports["spot"] is True


def test_the_component_refuses_an_azure_stack():
    raw = {**GOOD_CONFIG, "cloud": "azure", "vmSize": "Standard_NC4as_T4_v3"}
    config = validate(raw, "eastus", stack="test")
    with pytest.raises(ValueError, match="AwsTrainingBox got a stack for cloud 'azure'"):
        run_program(lambda: aws.AwsTrainingBox("glucose", config), aws_recorder())


NT = "not tried: an earlier candidate was taken"
NOT_SOLD = "not sold in us-east-1c"
BAD_CONFIGS = {
    "ssh from anywhere": {"sshAllowedCidr": "0.0.0.0/0"},
    "no budget": {"budgetAmount": None},
    "no alert e-mail": {"alertEmails": '["not-an-address"]'},
    "azure size": {"vmSize": "Standard_NC4as_T4_v3"},
    "unknown size": {"vmSize": "p9.mega"},
    "unknown time zone": {"autoShutdownTimeZone": "Mars/Olympus"},
    "bad time": {"autoShutdownTime": "25:00"},
    "idle too short": {"idleShutdownMinutes": "1"},
    "disk too small": {"osDiskSizeGb": "8"},
    "no nodes": {"nodeCount": "0"},
    "private key": {"sshPublicKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc"},
    "typo key": {"idleShutdownMinute": "30"},
    "more alert addresses than a budget takes": {
        "alertEmails": json.dumps([f"a{n}@lab.dev" for n in range(12)])
    },
    "a system file for a time zone": {"autoShutdownTimeZone": "posix/Europe/Berlin"},
    "a fallback with other gpus": {"fallbackVmSizes": "g5.12xlarge"},
    "a zone of another region": {"zones": "eu-west-1a"},
    "spot fallback on demand": {"spotFallback": "true"},
}


@pytest.mark.parametrize("overrides", BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_bad_config_fails_before_any_resource_exists(overrides):
    recorder = aws_recorder()
    with pytest.raises(pulumi.RunError, match="problem"):
        run_stack(recorder, **overrides)
    assert recorder.resources == []
    assert recorder.calls == []


def test_example_stack_file_with_its_change_lines_filled_is_a_valid_aws_stack():
    stack = yaml.safe_load((REPO / "Pulumi.aws-example.yaml").read_text())["config"]
    # Pulumi hands structured values to the program as JSON text and scalars as strings.
    settings = {
        key: value if isinstance(value, str) else json.dumps(value) for key, value in stack.items()
    }
    for key in ("sshPublicKey", "sshAllowedCidr", "alertEmails"):
        settings[f"glucose-training:{key}"] = GOOD_CONFIG[key]
    result = run_program(main_program(), aws_recorder(), settings)
    assert (result.exports["cloud"], result.exports["vmSize"]) == ("aws", "g6.xlarge")
    assert result.one(BOXES).inputs["count"] == 1


# --- the IAM documents as plain data ---------------------------------------------------


def test_trust_without_an_account_has_no_condition():
    (statement,) = aws_iam.assume_role_policy("ec2.amazonaws.com")["Statement"]
    assert "Condition" not in statement


def test_stop_policy_names_exactly_the_given_instances():
    arns = ["arn:aws:ec2:us-east-1:1:instance/i-1", "arn:aws:ec2:us-east-1:1:instance/i-2"]
    (statement,) = aws_iam.stop_instances_policy(arns)["Statement"]
    assert statement["Resource"] == arns
