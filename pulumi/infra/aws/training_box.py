"""One GPU training box (or a cluster of `nodeCount`) on AWS, with its guard rails.

The same public shape as the Azure component (`infra.training_box.TrainingBox`), and
the same parts beside it, one module each. What it declares, all tagged
project/stack/owner:

- a small VPC of its own with a subnet in each zone a candidate may go to, an
  SSH-only security group for box 0 and, for several boxes, one that lets them reach
  each other (`network.py` says why not the default VPC); the EC2 key pair from
  `sshPublicKey`;
- a launch template holding every setting of a box: AMI pinned (stack config `amiId`,
  else the newest matching one), IMDSv2 only with hop limit 2 (the trainer container
  reads spot notices), OS shutdown = stop, encrypted gp3 root, the shared cloud-init,
  a cluster placement group for more than one box;
- the boxes (`boxes.py`): launched through EC2 Fleet on the first candidate (size x
  zone, `vmSize` then `fallbackVmSizes`) that takes them all, or as persistent spot
  that stops instead of terminating, pool by pool; an Elastic IP for box 0 alone, the
  one `fab` connects to (`hosts`): the others are reached through it on their private
  addresses (`privateHosts`), so `nodeCount` stays clear of AWS's default quota of 5
  Elastic IPs per region;
- an S3 bucket (private, encrypted, versioned, lifecycle-trimmed: `storage.py`) and an
  ECR repo (`registry.py`);
- an instance role: this bucket, this repository, one metric namespace (`access.py`),
  and the SNS topic that mails alertEmails when a run ends (`notify.py`);
- guard rails (`guard_rails.py`), on whatever instances were taken: an EventBridge
  Scheduler daily stop, a monthly budget with e-mail alerts that stops the boxes at
  100 %, a CloudWatch alarm that stops a box whose GPUs stay idle.

A routine `pulumi up` never stops or replaces a box: a newer AMI and changed box
programs or settings make a new launch template version, which only boxes launched
later boot; cloud-init would not re-run them anyway, and `fab box-update` brings
programs and settings to running boxes.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.aws import access, guard_rails
from infra.aws.boxes import Ec2Boxes, launch_props
from infra.aws.network import AwsNetwork, declare_network
from infra.aws.notify import declare_notify
from infra.aws.registry import declare_registry
from infra.aws.storage import declare_box_programs, declare_storage
from infra.placement import Plan, plan
from infra.training_box import TrainingBox, box_user_data
from stack import box_packing
from stack.config import StackConfig
from stack.outputs import StackOutput

SSH_USER = "ubuntu"

# AWS Deep Learning Base AMI: NVIDIA driver, CUDA, Docker and the container toolkit.
# Its open-source kernel module drives Turing (sm_75) and newer only, so Volta (p3,
# V100) boots plain Ubuntu 22.04 and the shared setup script installs the
# proprietary driver, docker and the toolkit there (box/setup-box.sh).
DLAMI_OWNER = "amazon"
DLAMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
UBUNTU_OWNER = "099720109477"  # Canonical
# Canonical names EBS images hvm-ssd/ or, newer ones, hvm-ssd-gp3/: match either.
UBUNTU_NAME = "ubuntu/images/hvm-ssd*/ubuntu-jammy-22.04-amd64-server-*"

IMDS_HOP_LIMIT = 2  # host -> docker bridge -> container: the trainer reads spot notices


class AwsTrainingBox(TrainingBox):
    """N GPU instances with storage, registry and every guard rail, under one name."""

    CLOUD = "aws"

    def __init__(
        self,
        name: str,
        config: StackConfig,
        candidates: Plan | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(name, config, opts)
        candidates = candidates or plan(config, {})
        network = declare_network(name, config, candidates.zones, self._tags, parent=self)
        bucket = declare_storage(name, config, self)
        programs = box_packing.build_programs()
        programs_object = declare_box_programs(name, bucket, programs, self._tags, self)
        repository = declare_registry(name, self._tags, self)
        profile = access.declare_access(name, bucket, repository, self._tags, self)
        run_ends = declare_notify(name, config, profile.role, self._tags, self)
        user_data = box_user_data(
            config,
            SSH_USER,
            bucket.bucket.apply(lambda b: f"s3://{b}"),
            programs,
            notify_topic_arn=run_ends.arn,
        )
        template = self._launch_template(network, profile, user_data, programs_object)
        boxes = Ec2Boxes(
            f"{name}-boxes",
            launch_props(
                region=config.region,
                launch_template=template,
                count=config.node_count,
                candidates=list(candidates.candidates),
                dropped=list(candidates.dropped),
                subnets={zone: subnet.id for zone, subnet in network.subnets.items()},
                groups=[network.groups(index) for index in range(config.node_count)],
                name_prefix=f"{name}-box",
                pinned_image_id=config.ami_id or "",
                tags=self._tags,
            ),
            self._child(depends_on=[programs_object]),
        )
        ids = boxes.instanceIds
        address = aws.ec2.Eip(
            f"{name}-ip-0",
            domain="vpc",
            instance=ids.apply(lambda found: found[0]),
            tags=self._tags,
            opts=self._child(depends_on=[network.internet_gateway]),
        )
        self._guard_rails(ids)
        self._expose(
            hosts=pulumi.Output.all(address.public_ip),
            private_hosts=boxes.privateIps,
            box_ids=ids,
            ssh_user=SSH_USER,
            storage_uri=bucket.bucket.apply(lambda b: f"s3://{b}"),
            registry=repository.repository_url.apply(lambda url: url.split("/", 1)[0]),
            image_repository=repository.repository_url,
            placement=boxes.placement,
            placement_tried=boxes.placementTried,
            # What the first box really boots, to pin it with.
            cloud_outputs={
                StackOutput.AMI_ID: boxes.imageId,
                # `fab train --hours` moves this schedule's start past the run's deadline.
                StackOutput.DAILY_STOP_SCHEDULES: pulumi.Output.all(self._daily_stop.name),
                StackOutput.NOTIFY_TOPIC_ARN: run_ends.arn,
            },
        )

    def _child(self, **kwargs) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, **kwargs)

    def _guard_rails(self, ids: pulumi.Output[list[str]]) -> None:
        """The daily stop, the budget (and its stop) and the idle alarms, on the boxes taken."""
        config, name = self._config, self._name
        self._daily_stop = guard_rails.declare_daily_stop(
            name, config, ids, self._tags, parent=self
        )
        budget = guard_rails.declare_budget(name, config, self._tags, parent=self)
        if config.budget_stops_boxes:
            guard_rails.declare_budget_stop(name, config, budget, ids, self._tags, parent=self)
        if config.activate_cost_allocation_tag:
            guard_rails.activate_cost_scope_tag(name, parent=self)
        guard_rails.declare_idle_alarms(name, config, ids, self._tags, parent=self)

    def _launch_template(
        self,
        network: AwsNetwork,
        profile: aws.iam.InstanceProfile,
        user_data: pulumi.Output[str],
        programs: aws.s3.BucketObjectv2,
    ) -> aws.ec2.LaunchTemplate:
        """Every setting of a box but its size and subnet (a candidate's); each box boots
        after the programs' archive is in the bucket."""
        config, name = self._config, self._name
        key_pair = aws.ec2.KeyPair(
            f"{name}-key", public_key=config.ssh_public_key, tags=self._tags, opts=self._child()
        )
        placement = None
        if config.node_count > 1:
            group = aws.ec2.PlacementGroup(
                f"{name}-cluster", strategy="cluster", tags=self._tags, opts=self._child()
            )
            placement = {"group_name": group.name}
        image = self._image()
        return aws.ec2.LaunchTemplate(
            f"{name}-box-template",
            image_id=image.apply(lambda found: found[0]),
            key_name=key_pair.key_name,
            iam_instance_profile={"name": profile.name},
            # Box 0's groups; the others leave the SSH group once launched (boxes.py).
            vpc_security_group_ids=network.groups(0),
            metadata_options={
                "http_endpoint": "enabled",
                "http_tokens": "required",
                "http_put_response_hop_limit": IMDS_HOP_LIMIT,
            },
            # The watchdog's `shutdown -h now` must stop billing, not lose the disk.
            instance_initiated_shutdown_behavior="stop",
            block_device_mappings=[
                {
                    "device_name": image.apply(lambda found: found[1]),
                    "ebs": {
                        "volume_type": "gp3",
                        "volume_size": config.os_disk_size_gb,
                        "encrypted": "true",
                        "delete_on_termination": "true",
                    },
                }
            ],
            placement=placement,
            user_data=user_data,
            tag_specifications=[
                {"resource_type": "instance", "tags": self._tags},
                {"resource_type": "volume", "tags": self._tags},
            ],
            update_default_version=True,
            tags=self._tags,
            opts=self._child(depends_on=[programs]),
        )

    def _image(self) -> pulumi.Output[tuple[str, str]]:
        """(AMI id, its root device name): the pinned `amiId`, else the newest matching AMI
        today (boxes already launched keep theirs). A looked-up root snapshot must fit
        the disk: no reference says how big an AMI's snapshot is before the look-up, and
        EC2 refuses a smaller root volume at launch (a pinned `amiId` is the one the
        boxes already booted)."""
        if self._config.ami_id:
            pinned = aws.ec2.get_ami_output(
                filters=[{"name": "image-id", "values": [self._config.ami_id]}],
                opts=pulumi.InvokeOutputOptions(parent=self),
            )
            return pinned.apply(lambda image: (self._config.ami_id, image.root_device_name))
        owner, pattern = (
            (DLAMI_OWNER, DLAMI_NAME)
            if self._config.size.driver_class == "open"
            else (UBUNTU_OWNER, UBUNTU_NAME)
        )
        return aws.ec2.get_ami_output(
            owners=[owner],
            most_recent=True,
            filters=[
                {"name": "name", "values": [pattern]},
                {"name": "architecture", "values": ["x86_64"]},
                {"name": "state", "values": ["available"]},
            ],
            opts=pulumi.InvokeOutputOptions(parent=self),
        ).apply(self._fitting_disk)

    def _fitting_disk(self, image: aws.ec2.GetAmiResult) -> tuple[str, str]:
        """`image`'s id and root device, once its root snapshot fits `osDiskSizeGb`."""
        root = next(
            (m for m in image.block_device_mappings if m.device_name == image.root_device_name),
            None,
        )
        snapshot_gb = int((root.ebs if root else {}).get("volume_size") or 0)
        if snapshot_gb > self._config.os_disk_size_gb:
            raise ValueError(
                f"osDiskSizeGb: {self._config.os_disk_size_gb} GB is smaller than the root "
                f"snapshot of {image.id} ({image.name}), {snapshot_gb} GB; set "
                f"glucose-training:osDiskSizeGb to {snapshot_gb} or more"
            )
        return image.id, image.root_device_name
