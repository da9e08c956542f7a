"""Every pulumi-aws input the program declares, mapped onto the AWS reference it reaches.

One entry per resource type, one row per input path (dotted, `[]` for list items; a
map such as `tags` is one path). `@name` is the name pulumi-aws generates when the
program gives none: the logical name, "-" and 7 hex digits. The reference test fails
on a type missing here and on a recorded input path missing from its type's rows, so
nothing new reaches a cloud unchecked; `Excused` rows say why an input reaches no API.
The translation (which pulumi input becomes which API member) is pulumi-aws's, read
from its documentation and Terraform's provider source.
"""

from __future__ import annotations

from tests.pulumi.references.aws import (
    Api,
    BoolText,
    Cfn,
    Excused,
    IanaZone,
    InstanceTypeInRegion,
    ManagedPolicy,
    PolicyDocument,
    Reference,
    Region,
    TagMap,
    ZoneMap,
    ZoneOfRegion,
)

Rows = dict[str, tuple[Reference, ...]]

EC2_TAGS = (TagMap("ec2", "CreateTags", "Tags"),)
_SG_IN = ("AuthorizeSecurityGroupIngress", "IpPermissions[]")
_SG_OUT = ("AuthorizeSecurityGroupEgress", "IpPermissions[]")


def _rules(operation: str, permissions: str) -> Rows:
    """A security group's ingress or egress rules: one IpPermission each."""
    return {
        f"{permissions}.protocol": (Api("ec2", operation, "IpPermissions[].IpProtocol"),),
        f"{permissions}.fromPort": (Api("ec2", operation, "IpPermissions[].FromPort"),),
        f"{permissions}.toPort": (Api("ec2", operation, "IpPermissions[].ToPort"),),
        f"{permissions}.cidrBlocks[]": (
            Api("ec2", operation, "IpPermissions[].IpRanges[].CidrIp"),
        ),
        # The provider writes a rule's description on each of its ranges and group pairs,
        # whose character sets differ (a group pair's takes no "&").
        f"{permissions}.description": (
            Api("ec2", operation, "IpPermissions[].IpRanges[].Description"),
            Api("ec2", operation, "IpPermissions[].UserIdGroupPairs[].Description"),
        ),
        f"{permissions}.self": (
            Excused("the provider sends self: true as a UserIdGroupPairs entry of this group"),
        ),
    }


_BUCKET = {"bucket": (Cfn("AWS::S3::Bucket", "BucketName"),)}
_LIFECYCLE = "LifecycleConfiguration.Rules[]"
_LT = "LaunchTemplateData"
_OVERRIDES = "LaunchTemplateConfigs[].Overrides[]"
_FLEET_TEMPLATE = "LaunchTemplateConfigs[].LaunchTemplateSpecification"
_RECORD = "a record of a candidate dropped before the launch (placementTried), never sent"
_SSM = "Definition.SsmActionDefinition"

AWS: dict[str, Rows] = {
    "aws:ec2/vpc:Vpc": {
        "cidrBlock": (Api("ec2", "CreateVpc", "CidrBlock"),),
        "enableDnsHostnames": (Api("ec2", "ModifyVpcAttribute", "EnableDnsHostnames.Value"),),
        "enableDnsSupport": (Api("ec2", "ModifyVpcAttribute", "EnableDnsSupport.Value"),),
        "tags": EC2_TAGS,
    },
    "aws:ec2/internetGateway:InternetGateway": {
        "vpcId": (Api("ec2", "AttachInternetGateway", "VpcId"),),
        "tags": EC2_TAGS,
    },
    "aws:ec2/subnet:Subnet": {
        "vpcId": (Api("ec2", "CreateSubnet", "VpcId"),),
        "cidrBlock": (Api("ec2", "CreateSubnet", "CidrBlock"),),
        "availabilityZone": (Api("ec2", "CreateSubnet", "AvailabilityZone"),),
        "mapPublicIpOnLaunch": (Api("ec2", "ModifySubnetAttribute", "MapPublicIpOnLaunch.Value"),),
        "tags": EC2_TAGS,
    },
    "aws:ec2/routeTable:RouteTable": {
        "vpcId": (Api("ec2", "CreateRouteTable", "VpcId"),),
        "routes[].cidrBlock": (Api("ec2", "CreateRoute", "DestinationCidrBlock"),),
        "routes[].gatewayId": (Api("ec2", "CreateRoute", "GatewayId"),),
        "tags": EC2_TAGS,
    },
    "aws:ec2/routeTableAssociation:RouteTableAssociation": {
        "subnetId": (Api("ec2", "AssociateRouteTable", "SubnetId"),),
        "routeTableId": (Api("ec2", "AssociateRouteTable", "RouteTableId"),),
    },
    "aws:ec2/securityGroup:SecurityGroup": {
        "@name": (Api("ec2", "CreateSecurityGroup", "GroupName"),),
        "description": (
            Api("ec2", "CreateSecurityGroup", "Description"),
            Cfn("AWS::EC2::SecurityGroup", "GroupDescription"),
        ),
        "vpcId": (Api("ec2", "CreateSecurityGroup", "VpcId"),),
        **_rules("AuthorizeSecurityGroupIngress", "ingress[]"),
        **_rules("AuthorizeSecurityGroupEgress", "egress[]"),
        "tags": EC2_TAGS,
    },
    "aws:ec2/keyPair:KeyPair": {
        "@name": (Api("ec2", "ImportKeyPair", "KeyName"), Api("ec2", "CreateKeyPair", "KeyName")),
        "publicKey": (Api("ec2", "ImportKeyPair", "PublicKeyMaterial"),),
        "tags": EC2_TAGS,
    },
    "aws:ec2/placementGroup:PlacementGroup": {
        "@name": (Api("ec2", "CreatePlacementGroup", "GroupName"),),
        "strategy": (Api("ec2", "CreatePlacementGroup", "Strategy"),),
        "tags": EC2_TAGS,
    },
    "aws:ec2/launchTemplate:LaunchTemplate": {
        "@name": (Api("ec2", "CreateLaunchTemplate", "LaunchTemplateName"),),
        **{
            path: (Api("ec2", "CreateLaunchTemplate", f"{_LT}.{member}"),)
            for path, member in (
                ("imageId", "ImageId"),
                ("keyName", "KeyName"),
                ("iamInstanceProfile.name", "IamInstanceProfile.Name"),
                ("vpcSecurityGroupIds[]", "SecurityGroupIds[]"),
                ("metadataOptions.httpEndpoint", "MetadataOptions.HttpEndpoint"),
                ("metadataOptions.httpTokens", "MetadataOptions.HttpTokens"),
                (
                    "metadataOptions.httpPutResponseHopLimit",
                    "MetadataOptions.HttpPutResponseHopLimit",
                ),
                ("instanceInitiatedShutdownBehavior", "InstanceInitiatedShutdownBehavior"),
                ("blockDeviceMappings[].deviceName", "BlockDeviceMappings[].DeviceName"),
                ("blockDeviceMappings[].ebs.volumeType", "BlockDeviceMappings[].Ebs.VolumeType"),
                ("blockDeviceMappings[].ebs.volumeSize", "BlockDeviceMappings[].Ebs.VolumeSize"),
                ("placement.groupName", "Placement.GroupName"),
                ("userData", "UserData"),
                ("tagSpecifications[].resourceType", "TagSpecifications[].ResourceType"),
            )
        },
        "blockDeviceMappings[].ebs.encrypted": (
            BoolText(
                Api("ec2", "CreateLaunchTemplate", f"{_LT}.BlockDeviceMappings[].Ebs.Encrypted")
            ),
        ),
        "blockDeviceMappings[].ebs.deleteOnTermination": (
            BoolText(
                Api(
                    "ec2",
                    "CreateLaunchTemplate",
                    f"{_LT}.BlockDeviceMappings[].Ebs.DeleteOnTermination",
                )
            ),
        ),
        "tagSpecifications[].tags": (
            TagMap("ec2", "CreateLaunchTemplate", f"{_LT}.TagSpecifications[].Tags"),
        ),
        "updateDefaultVersion": (
            Excused("provider-side: ModifyLaunchTemplate's DefaultVersion after a new version"),
        ),
        "tags": (TagMap("ec2", "CreateLaunchTemplate", "TagSpecifications[].Tags"),),
    },
    "aws:ec2/eip:Eip": {
        "domain": (Api("ec2", "AllocateAddress", "Domain"),),
        "instance": (Api("ec2", "AssociateAddress", "InstanceId"),),
        "tags": EC2_TAGS,
    },
    "aws:s3/bucket:Bucket": {
        "@name": (Api("s3", "CreateBucket", "Bucket"), Cfn("AWS::S3::Bucket", "BucketName")),
        "forceDestroy": (Excused("provider-side: empty the bucket before deleting it"),),
        "tags": (TagMap("s3", "PutBucketTagging", "Tagging.TagSet"),),
    },
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": {
        **_BUCKET,
        **{
            f"{key[0].lower()}{key[1:]}": (
                Api("s3", "PutPublicAccessBlock", f"PublicAccessBlockConfiguration.{key}"),
            )
            for key in (
                "BlockPublicAcls",
                "BlockPublicPolicy",
                "IgnorePublicAcls",
                "RestrictPublicBuckets",
            )
        },
    },
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": {
        **_BUCKET,
        "rules[].applyServerSideEncryptionByDefault.sseAlgorithm": (
            Api(
                "s3",
                "PutBucketEncryption",
                "ServerSideEncryptionConfiguration.Rules[].ApplyServerSideEncryptionByDefault"
                ".SSEAlgorithm",
            ),
        ),
    },
    "aws:s3/bucketVersioning:BucketVersioning": {
        **_BUCKET,
        "versioningConfiguration.status": (
            Api("s3", "PutBucketVersioning", "VersioningConfiguration.Status"),
        ),
    },
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": {
        **_BUCKET,
        "rules[].id": (Api("s3", "PutBucketLifecycleConfiguration", f"{_LIFECYCLE}.ID"),),
        "rules[].status": (Api("s3", "PutBucketLifecycleConfiguration", f"{_LIFECYCLE}.Status"),),
        "rules[].filter.prefix": (
            Api("s3", "PutBucketLifecycleConfiguration", f"{_LIFECYCLE}.Filter.Prefix"),
        ),
        "rules[].expiration.days": (
            Api("s3", "PutBucketLifecycleConfiguration", f"{_LIFECYCLE}.Expiration.Days"),
        ),
        "rules[].abortIncompleteMultipartUpload.daysAfterInitiation": (
            Api(
                "s3",
                "PutBucketLifecycleConfiguration",
                f"{_LIFECYCLE}.AbortIncompleteMultipartUpload.DaysAfterInitiation",
            ),
        ),
        "rules[].noncurrentVersionExpiration.noncurrentDays": (
            Api(
                "s3",
                "PutBucketLifecycleConfiguration",
                f"{_LIFECYCLE}.NoncurrentVersionExpiration.NoncurrentDays",
            ),
        ),
    },
    "aws:s3/bucketObjectv2:BucketObjectv2": {
        **_BUCKET,
        "key": (Api("s3", "PutObject", "Key"),),
        "content": (Api("s3", "PutObject", "Body"),),
        "contentType": (Api("s3", "PutObject", "ContentType"),),
        "tags": (TagMap("s3", "PutObjectTagging", "Tagging.TagSet"),),
    },
    "aws:ecr/repository:Repository": {
        "@name": (
            Api("ecr", "CreateRepository", "repositoryName"),
            Cfn("AWS::ECR::Repository", "RepositoryName"),
        ),
        "imageTagMutability": (Api("ecr", "CreateRepository", "imageTagMutability"),),
        "imageScanningConfiguration.scanOnPush": (
            Api("ecr", "CreateRepository", "imageScanningConfiguration.scanOnPush"),
        ),
        "forceDelete": (Excused("provider-side: delete the images with the repository"),),
        "tags": (TagMap("ecr", "CreateRepository", "tags"),),
    },
    "aws:iam/role:Role": {
        "@name": (Api("iam", "CreateRole", "RoleName"),),
        "assumeRolePolicy": (
            Api("iam", "CreateRole", "AssumeRolePolicyDocument"),
            PolicyDocument(),
        ),
        "tags": (TagMap("iam", "CreateRole", "Tags"),),
    },
    "aws:iam/rolePolicy:RolePolicy": {
        "@name": (Api("iam", "PutRolePolicy", "PolicyName"),),
        "role": (Api("iam", "PutRolePolicy", "RoleName"),),
        "policy": (Api("iam", "PutRolePolicy", "PolicyDocument"), PolicyDocument()),
    },
    "aws:sns/topic:Topic": {
        "@name": (Api("sns", "CreateTopic", "Name"), Cfn("AWS::SNS::Topic", "TopicName")),
        "tags": (TagMap("sns", "CreateTopic", "Tags"),),
    },
    "aws:sns/topicSubscription:TopicSubscription": {
        "topic": (Api("sns", "Subscribe", "TopicArn"), Cfn("AWS::SNS::Subscription", "TopicArn")),
        "protocol": (
            Api("sns", "Subscribe", "Protocol"),
            Cfn("AWS::SNS::Subscription", "Protocol"),
        ),
        "endpoint": (
            Api("sns", "Subscribe", "Endpoint"),
            Cfn("AWS::SNS::Subscription", "Endpoint"),
        ),
    },
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": {
        "role": (Api("iam", "AttachRolePolicy", "RoleName"),),
        "policyArn": (Api("iam", "AttachRolePolicy", "PolicyArn"), ManagedPolicy()),
    },
    "aws:iam/instanceProfile:InstanceProfile": {
        "@name": (Api("iam", "CreateInstanceProfile", "InstanceProfileName"),),
        "role": (Api("iam", "AddRoleToInstanceProfile", "RoleName"),),
        "tags": (TagMap("iam", "CreateInstanceProfile", "Tags"),),
    },
    "aws:budgets/budget:Budget": {
        "@name": (Api("budgets", "CreateBudget", "Budget.BudgetName"),),
        "budgetType": (Api("budgets", "CreateBudget", "Budget.BudgetType"),),
        "timeUnit": (Api("budgets", "CreateBudget", "Budget.TimeUnit"),),
        "limitAmount": (Api("budgets", "CreateBudget", "Budget.BudgetLimit.Amount"),),
        "limitUnit": (Api("budgets", "CreateBudget", "Budget.BudgetLimit.Unit"),),
        "costFilters[].name": (Api("budgets", "CreateBudget", "Budget.CostFilters{key}"),),
        "costFilters[].values[]": (Api("budgets", "CreateBudget", "Budget.CostFilters{value}[]"),),
        "notifications": (Api("budgets", "CreateBudget", "NotificationsWithSubscribers"),),
        "notifications[].notificationType": (
            Api("budgets", "CreateNotification", "Notification.NotificationType"),
        ),
        "notifications[].comparisonOperator": (
            Api("budgets", "CreateNotification", "Notification.ComparisonOperator"),
        ),
        "notifications[].threshold": (
            Api("budgets", "CreateNotification", "Notification.Threshold"),
            Cfn("AWS::Budgets::Budget", "NotificationsWithSubscribers[].Notification.Threshold"),
        ),
        "notifications[].thresholdType": (
            Api("budgets", "CreateNotification", "Notification.ThresholdType"),
        ),
        "notifications[].subscriberEmailAddresses": (
            Api("budgets", "CreateNotification", "Subscribers"),
        ),
        "notifications[].subscriberEmailAddresses[]": (
            Api("budgets", "CreateNotification", "Subscribers[].Address"),
        ),
        "tags": (TagMap("budgets", "CreateBudget", "ResourceTags"),),
    },
    "aws:budgets/budgetAction:BudgetAction": {
        "budgetName": (Api("budgets", "CreateBudgetAction", "BudgetName"),),
        "actionType": (Api("budgets", "CreateBudgetAction", "ActionType"),),
        "approvalModel": (Api("budgets", "CreateBudgetAction", "ApprovalModel"),),
        "notificationType": (Api("budgets", "CreateBudgetAction", "NotificationType"),),
        "actionThreshold.actionThresholdType": (
            Api("budgets", "CreateBudgetAction", "ActionThreshold.ActionThresholdType"),
        ),
        "actionThreshold.actionThresholdValue": (
            Api("budgets", "CreateBudgetAction", "ActionThreshold.ActionThresholdValue"),
        ),
        "definition.ssmActionDefinition.actionSubType": (
            Api("budgets", "CreateBudgetAction", f"{_SSM}.ActionSubType"),
        ),
        "definition.ssmActionDefinition.region": (
            Api("budgets", "CreateBudgetAction", f"{_SSM}.Region"),
            Region("ssm"),
        ),
        "definition.ssmActionDefinition.instanceIds": (
            Api("budgets", "CreateBudgetAction", f"{_SSM}.InstanceIds"),
        ),
        "definition.ssmActionDefinition.instanceIds[]": (
            Api("budgets", "CreateBudgetAction", f"{_SSM}.InstanceIds[]"),
        ),
        "executionRoleArn": (Api("budgets", "CreateBudgetAction", "ExecutionRoleArn"),),
        "subscribers": (Api("budgets", "CreateBudgetAction", "Subscribers"),),
        "subscribers[].address": (Api("budgets", "CreateBudgetAction", "Subscribers[].Address"),),
        "subscribers[].subscriptionType": (
            Api("budgets", "CreateBudgetAction", "Subscribers[].SubscriptionType"),
        ),
        "tags": (TagMap("budgets", "CreateBudgetAction", "ResourceTags"),),
    },
    "aws:costexplorer/costAllocationTag:CostAllocationTag": {
        "tagKey": (
            Api("ce", "UpdateCostAllocationTagsStatus", "CostAllocationTagsStatus[].TagKey"),
        ),
        "status": (
            Api("ce", "UpdateCostAllocationTagsStatus", "CostAllocationTagsStatus[].Status"),
        ),
    },
    "aws:scheduler/schedule:Schedule": {
        "@name": (Api("scheduler", "CreateSchedule", "Name"),),
        "description": (Api("scheduler", "CreateSchedule", "Description"),),
        "scheduleExpression": (Api("scheduler", "CreateSchedule", "ScheduleExpression"),),
        "scheduleExpressionTimezone": (
            Api("scheduler", "CreateSchedule", "ScheduleExpressionTimezone"),
            IanaZone(),
        ),
        "state": (Api("scheduler", "CreateSchedule", "State"),),
        "flexibleTimeWindow.mode": (Api("scheduler", "CreateSchedule", "FlexibleTimeWindow.Mode"),),
        "target.arn": (Api("scheduler", "CreateSchedule", "Target.Arn"),),
        "target.roleArn": (Api("scheduler", "CreateSchedule", "Target.RoleArn"),),
        "target.input": (Api("scheduler", "CreateSchedule", "Target.Input"),),
        "target.retryPolicy.maximumRetryAttempts": (
            Api("scheduler", "CreateSchedule", "Target.RetryPolicy.MaximumRetryAttempts"),
        ),
    },
    "aws:cloudwatch/metricAlarm:MetricAlarm": {
        "@name": (Api("cloudwatch", "PutMetricAlarm", "AlarmName"),),
        "alarmDescription": (Api("cloudwatch", "PutMetricAlarm", "AlarmDescription"),),
        "namespace": (Api("cloudwatch", "PutMetricAlarm", "Namespace"),),
        "metricName": (Api("cloudwatch", "PutMetricAlarm", "MetricName"),),
        "dimensions": (TagMap("cloudwatch", "PutMetricAlarm", "Dimensions", key="Name"),),
        "statistic": (Api("cloudwatch", "PutMetricAlarm", "Statistic"),),
        "period": (Api("cloudwatch", "PutMetricAlarm", "Period"),),
        "evaluationPeriods": (Api("cloudwatch", "PutMetricAlarm", "EvaluationPeriods"),),
        "datapointsToAlarm": (Api("cloudwatch", "PutMetricAlarm", "DatapointsToAlarm"),),
        "comparisonOperator": (Api("cloudwatch", "PutMetricAlarm", "ComparisonOperator"),),
        "threshold": (Api("cloudwatch", "PutMetricAlarm", "Threshold"),),
        "treatMissingData": (
            Api("cloudwatch", "PutMetricAlarm", "TreatMissingData"),
            Cfn("AWS::CloudWatch::Alarm", "TreatMissingData"),
        ),
        "alarmActions": (Api("cloudwatch", "PutMetricAlarm", "AlarmActions"),),
        "alarmActions[]": (Api("cloudwatch", "PutMetricAlarm", "AlarmActions[]"),),
        "tags": (TagMap("cloudwatch", "PutMetricAlarm", "Tags"),),
    },
    # Dynamic: the boxes' own provider calls EC2 with these (stack/ec2_launch.py).
    "pulumi-python:dynamic/glucose-training:Ec2Boxes": {
        "region": (Region("ec2"),),
        "profile": (Excused("a profile name of the deployer's own AWS config, read by boto3"),),
        "launchTemplateId": (
            Api("ec2", "CreateFleet", f"{_FLEET_TEMPLATE}.LaunchTemplateId"),
            Api("ec2", "RunInstances", "LaunchTemplate.LaunchTemplateId"),
        ),
        "launchTemplateVersion": (
            Api("ec2", "CreateFleet", f"{_FLEET_TEMPLATE}.Version"),
            Api("ec2", "RunInstances", "LaunchTemplate.Version"),
        ),
        "count": (
            Api("ec2", "CreateFleet", "TargetCapacitySpecification.TotalTargetCapacity"),
            Api("ec2", "CreateFleet", "OnDemandOptions.MinTargetCapacity"),
            Api("ec2", "RunInstances", "MinCount"),
            Api("ec2", "RunInstances", "MaxCount"),
        ),
        "candidates[].size": (
            Api("ec2", "CreateFleet", f"{_OVERRIDES}.InstanceType"),
            Api("ec2", "RunInstances", "InstanceType"),
            InstanceTypeInRegion(),
        ),
        "candidates[].zone": (
            Api("ec2", "CreateFleet", f"{_OVERRIDES}.AvailabilityZone"),
            ZoneOfRegion(),
        ),
        "candidates[].market": (
            Api("ec2", "CreateFleet", "TargetCapacitySpecification.DefaultTargetCapacityType"),
        ),
        **{
            f"dropped[].{key}": (Excused(_RECORD),) for key in ("size", "zone", "market", "refusal")
        },
        "subnets": (ZoneMap(Api("ec2", "CreateFleet", f"{_OVERRIDES}.SubnetId")),),
        "groups[][]": (Api("ec2", "ModifyInstanceAttribute", "Groups[]"),),
        "namePrefix": (Api("ec2", "CreateTags", "Tags[].Value"),),
        "pinnedImageId": (
            Excused("compared only: a new pinned amiId replaces the boxes; the template has it"),
        ),
        "tags": (
            TagMap("ec2", "RunInstances", "TagSpecifications[].Tags"),
            TagMap("ec2", "CreateFleet", "TagSpecifications[].Tags"),
        ),
        "providerCode": (
            Excused("compared only: a digest of the provider's source, stored by an update"),
        ),
        "__provider": (Excused("the pickled provider Pulumi runs the boxes' launch with"),),
    },
}
