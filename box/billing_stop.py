"""Stop paying for the box: what that takes differs per cloud.

AWS: an OS shutdown is enough, because the instance is launched with
`instance_initiated_shutdown_behavior=stop`. Azure: an OS shutdown leaves the VM
"stopped" but still billed; only a deallocate through ARM stops the bill
(https://learn.microsoft.com/azure/virtual-machines/states-billing), so the box
asks ARM to deallocate itself with its managed identity. When ARM refuses, the box
stays up (an OS shutdown would leave it billed *and* unreachable, with nothing left
to retry); the watchdog retries with backoff and says STILL BILLED everywhere it can.
Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import instance_metadata
from bounded_command import CommandTimeout, run_bounded
from watchdog_config import WatchdogConfig

SHUTDOWN_TIMEOUT_SECONDS = 30
# ARM answers 202 Accepted (deallocation runs asynchronously) or 200.
ARM_ACCEPTED_STATUSES = (200, 202)
# IMDS resource id, IMDS token, ARM deallocate.
AZURE_REQUESTS = 3


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
        resource_id = azure_deallocate(config)
    except instance_metadata.MetadataError as error:
        log(
            f"ERROR: Azure deallocate failed ({error}): the VM is STILL BILLED and stays up "
            "so this watchdog can retry; deallocate it by hand (az vm deallocate) and "
            "check the VM identity's role on the VM"
        )
        return StopResult("azure-deallocate", str(error)[:300])
    log(f"asked ARM to deallocate {resource_id}")
    return StopResult("azure-deallocate")


def azure_deallocate(config: WatchdogConfig) -> str:
    resource_id = instance_metadata.azure_vm_resource_id(config)
    token = instance_metadata.azure_arm_token(config)
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
