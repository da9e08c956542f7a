"""What a training box is on either cloud: the public shape both components share.

`AzureTrainingBox` and `AwsTrainingBox` build very different resources, but the
program (`pulumi/__main__.py`) and the stack's outputs (`stack.outputs`) see only this: `hosts`
(box 0's public address, the one `fab` connects to), `private_hosts` (every box's
private address in rank order: `fab` hops to boxes 1..N-1 through box 0, and the
boxes meet there), `box_ids` (each box's cloud id, rank order), `ssh_user`,
`storage_uri`, `registry` and `image_repository`, and where the boxes went (`placement`:
size, zone, market; `placement_tried`: every candidate and its refusal, the record
stack/placement.py keeps), set once through `_expose`, which
also registers them as the component's outputs. A cloud may add
outputs of its own (`cloud_outputs`, e.g. AWS's `amiId`), exported beside them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pulumi

from stack import box_packing, storage_layout
from stack.cloud_init import (
    ProgramsSource,
    box_guard_settings,
    box_notify_settings,
    box_storage_settings,
    encode_user_data,
    render_cloud_init,
)
from stack.config import StackConfig
from stack.outputs import StackOutput


class TrainingBox(pulumi.ComponentResource):
    """One stack's GPU boxes with storage, registry and guard rails, under one name."""

    CLOUD: ClassVar[str]
    """The `cloud` stack setting this component builds for."""

    hosts: pulumi.Output[list[str]]
    private_hosts: pulumi.Output[list[str]]
    box_ids: pulumi.Output[list[str]]
    """Each box's cloud id in rank order (EC2 instance ids, Azure VM resource ids): what
    `fab start` starts and what `fab` asks the power state of."""
    ssh_user: str
    storage_uri: pulumi.Output[str]
    registry: pulumi.Output[str]
    image_repository: pulumi.Output[str]
    placement: pulumi.Output[dict[str, str]]
    """The candidate the boxes were launched on: `{"size", "zone", "market"}`."""
    placement_tried: pulumi.Output[list[dict[str, str]]]
    """Every candidate in the order tried, with its refusal ("" for the one taken)."""
    cloud_outputs: dict[str, Any]
    """Stack outputs only this cloud has, by their exported (camelCase) names."""

    def __init__(
        self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if config.cloud != self.CLOUD:
            raise ValueError(f"{type(self).__name__} got a stack for cloud {config.cloud!r}")
        super().__init__(f"glucose-training:{self.CLOUD}:TrainingBox", name, None, opts)
        self._name = name
        self._config = config
        self._tags = config.tags

    def _expose(
        self,
        *,
        hosts: pulumi.Output[list[str]],
        private_hosts: pulumi.Output[list[str]],
        box_ids: pulumi.Output[list[str]],
        ssh_user: str,
        storage_uri: pulumi.Output[str],
        registry: pulumi.Output[str],
        image_repository: pulumi.Output[str],
        placement: pulumi.Output[dict[str, str]],
        placement_tried: pulumi.Output[list[dict[str, str]]],
        cloud_outputs: dict[str, Any] | None = None,
    ) -> None:
        """Set the public outputs and register them (camelCase, as the stack exports them)."""
        self.hosts = hosts
        self.private_hosts = private_hosts
        self.box_ids = box_ids
        self.ssh_user = ssh_user
        self.storage_uri = storage_uri
        self.registry = registry
        self.image_repository = image_repository
        self.placement = placement
        self.placement_tried = placement_tried
        self.cloud_outputs = dict(cloud_outputs or {})
        self.register_outputs(
            {
                StackOutput.HOSTS: hosts,
                StackOutput.PRIVATE_HOSTS: private_hosts,
                StackOutput.BOX_IDS: box_ids,
                StackOutput.SSH_USER: ssh_user,
                StackOutput.STORAGE_URI: storage_uri,
                StackOutput.REGISTRY: registry,
                StackOutput.IMAGE_REPOSITORY: image_repository,
                StackOutput.PLACEMENT: placement,
                StackOutput.PLACEMENT_TRIED: placement_tried,
                **self.cloud_outputs,
            }
        )


def box_user_data(
    config: StackConfig,
    ssh_user: str,
    storage_uri: pulumi.Output[str],
    programs: box_packing.Programs,
    notify_topic_arn: pulumi.Output[str] | None = None,
) -> pulumi.Output[str]:
    """The encoded cloud-init of every box of the stack: its settings (with where it
    tells a run's end: the stack's webhook, `notify_topic_arn` on AWS; and where it
    stores a failed one's: `storage_uri`), and where in `storage_uri` the programs'
    archive is (and its sha256). The settings are checked
    now: a bad one fails the preview, not a booting box."""
    guard = box_guard_settings(config)
    box_packing.settings_text(config.cloud, box_notify_settings(config), **guard)
    topic = notify_topic_arn if notify_topic_arn is not None else pulumi.Output.from_input("")

    def user_data(uri: str, topic_arn: str) -> str:
        notify = box_notify_settings(config, topic_arn)
        source = ProgramsSource(
            cloud=config.cloud,
            ssh_user=ssh_user,
            storage=uri,
            key=storage_layout.box_programs_key(programs.sha256),
            sha256=programs.sha256,
            region=config.region,
        )
        storage = box_storage_settings(config.cloud, uri, config.region)
        settings = box_packing.settings_text(config.cloud, notify, storage, **guard)
        return encode_user_data(render_cloud_init(source, settings))

    encoded = pulumi.Output.all(storage_uri, topic).apply(lambda args: user_data(*args))
    # The settings hold the webhook URL, a credential: secret in the state and the plans.
    return pulumi.Output.secret(encoded) if config.notify_webhook else encoded
