"""Stop paying for the box: what that takes differs per cloud.

AWS: an OS shutdown is enough, because the instance is launched with
`instance_initiated_shutdown_behavior=stop`. Azure: an OS shutdown leaves the VM
"stopped" but still billed; only a deallocate through ARM stops the bill
(https://learn.microsoft.com/azure/virtual-machines/states-billing), so the box
asks ARM to deallocate itself with its managed identity and falls back to an OS
shutdown, loudly, when that fails. Standard library only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import instance_metadata
from watchdog_config import WatchdogConfig

SHUTDOWN_TIMEOUT_SECONDS = 60
# ARM answers 202 Accepted (deallocation runs asynchronously) or 200.
ARM_ACCEPTED_STATUSES = (200, 202)


def stop_billing(config: WatchdogConfig, log: Callable[[str], None]) -> str:
    """Ask the cloud to stop billing; return the method used (for the state file)."""
    if config.cloud == "azure":
        try:
            resource_id = azure_deallocate(config)
        except instance_metadata.MetadataError as error:
            log(
                f"ERROR: Azure deallocate failed ({error}); falling back to an OS shutdown, "
                "which leaves the VM STOPPED BUT STILL BILLED: deallocate it by hand "
                "(az vm deallocate) and check the VM identity's role on the VM"
            )
        else:
            log(f"asked ARM to deallocate {resource_id}")
            return "azure-deallocate"
    os_shutdown(config, log)
    return "os-shutdown"


def azure_deallocate(config: WatchdogConfig) -> str:
    resource_id = instance_metadata.azure_vm_resource_id(config)
    token = instance_metadata.azure_arm_token(config)
    url = f"{config.arm_url}{resource_id}/deallocate?api-version={config.arm_api_version}"
    status, body = instance_metadata.request(
        url,
        method="POST",
        body=b"",
        timeout_seconds=config.http_timeout_seconds,
        headers={"Authorization": f"Bearer {token}", "Content-Length": "0"},
    )
    if status not in ARM_ACCEPTED_STATUSES:
        raise instance_metadata.MetadataError(f"POST {url}: HTTP {status}: {body[:300]!r}")
    return resource_id


def os_shutdown(config: WatchdogConfig, log: Callable[[str], None]) -> None:
    command = list(config.shutdown_command)
    log(f"running {' '.join(command)}")
    try:
        done = subprocess.run(command, timeout=SHUTDOWN_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        log(f"ERROR: {' '.join(command)} failed: {error}")
        return
    if done.returncode != 0:
        log(f"ERROR: {' '.join(command)} exited {done.returncode}")
