"""Stop paying for the box: what that takes differs per cloud.

AWS: an OS shutdown is enough, because the instance is launched with
`instance_initiated_shutdown_behavior=stop`. Azure: an OS shutdown leaves the VM
"stopped" but still billed; only a deallocate through ARM stops the bill
(https://learn.microsoft.com/azure/virtual-machines/states-billing), so the box
asks ARM to deallocate itself with its managed identity. When ARM refuses, or its
answer does not come whole within the request's time (each request is bounded as a
whole, body included: box/bounded_post.call), the box stays up (an OS shutdown would
leave it billed *and* unreachable, with nothing left to retry); the watchdog retries
with backoff and says STILL BILLED everywhere it can.
Before the deallocate the box deletes its VM's run deadline tag (contract.DEADLINE_TAG):
until that deadline the stack's keeper starts a deallocated VM again, and a stop the
box asked for must stay a stop. A tag that will not go is logged and the deallocate
happens all the same: stopping the bill comes first.
Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from box import contract, instance_metadata
from box.bounded_command import CommandTimeout, run_bounded
from box.watchdog_config import WatchdogConfig

SHUTDOWN_TIMEOUT_SECONDS = 30
# ARM answers 202 Accepted (deallocation runs asynchronously) or 200.
ARM_ACCEPTED_STATUSES = (200, 202)
# IMDS resource id, IMDS token, ARM tags read and delete, ARM deallocate.
AZURE_REQUESTS = 5


@dataclasses.dataclass(frozen=True)
class StopResult:
    method: str
    """azure-deallocate or os-shutdown."""
    error: str = ""
    """Empty when the cloud (or the OS) accepted the request."""


def stop_billing(config: WatchdogConfig, log: Callable[[str], None]) -> StopResult:
    """Ask the cloud to stop billing once; the caller retries a failure."""
    if config.cloud != "azure":
        return StopResult("os-shutdown", os_shutdown(config, log))
    try:
        resource_id = azure_deallocate(config, log)
    except instance_metadata.MetadataError as error:
        log(
            f"ERROR: Azure deallocate failed ({error}): the VM is STILL BILLED and stays up "
            "so this watchdog can retry; deallocate it by hand (az vm deallocate) and "
            "check the VM identity's role on the VM"
        )
        return StopResult("azure-deallocate", str(error)[:300])
    log(f"asked ARM to deallocate {resource_id}")
    return StopResult("azure-deallocate")


def azure_deallocate(config: WatchdogConfig, log: Callable[[str], None]) -> str:
    """Ask ARM to deallocate this VM, its deadline tag deleted first; its resource id."""
    resource_id = instance_metadata.azure_vm_resource_id(config)
    token = instance_metadata.azure_arm_token(config)
    try:
        if instance_metadata.azure_delete_tag(config, resource_id, token, contract.DEADLINE_TAG):
            log(f"deleted the run's deadline tag {contract.DEADLINE_TAG} of {resource_id}")
    except instance_metadata.MetadataError as error:
        log(
            f"WARNING: could not delete the deadline tag {contract.DEADLINE_TAG} ({error}): "
            "the stack's keeper may start this VM again until the run's deadline; "
            "check the VM identity's Tag Contributor role on the VM"
        )
    url = f"{config.arm_url}{resource_id}/deallocate?api-version={config.arm_api_version}"
    status, body = instance_metadata.request(
        url,
        method="POST",
        body=b"",
        timeout_seconds=config.request_timeout_seconds,
        headers={"Authorization": f"Bearer {token}", "Content-Length": "0"},
    )
    if status not in ARM_ACCEPTED_STATUSES:
        raise instance_metadata.MetadataError(f"POST {url}: HTTP {status}: {body[:300]!r}")
    return resource_id


def os_shutdown(config: WatchdogConfig, log: Callable[[str], None]) -> str:
    """Run the shutdown command; the error, or "" when it was accepted."""
    command = list(config.shutdown_command)
    log(f"running {' '.join(command)}")
    try:
        done = run_bounded(command, SHUTDOWN_TIMEOUT_SECONDS)
    except (OSError, CommandTimeout) as error:
        message = f"{' '.join(command)} failed: {error}"
    else:
        if done.returncode == 0:
            return ""
        message = f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[:200]}"
    log(f"ERROR: {message}: the box is STILL BILLED; the watchdog retries")
    return message
