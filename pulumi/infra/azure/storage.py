"""The Azure stack's storage: one account, one private container, recoverable blobs.

Shared-key access is off: the boxes reach it with their managed identity and the
deployer with `az login` (pulumi/infra/azure/access.py grants both). Soft delete and
versioning keep what a bad sync or a hostile writer overwrites restorable for
DELETED_BLOB_RETENTION_DAYS; lifecycle rules age out old versions and delete the
scratch under tmp/ (stack.storage_layout).
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import resources, storage

from infra.azure.names import alnum
from stack import storage_layout
from stack.config import StackConfig

CONTAINER_NAME = "training"
DELETED_BLOB_RETENTION_DAYS = 14
OLD_VERSION_DAYS = 14


def declare_storage(
    name: str,
    config: StackConfig,
    group: resources.ResourceGroup,
    parent: pulumi.Resource,
) -> tuple[storage.StorageAccount, storage.BlobContainer]:
    """The account and its container; kept through `pulumi destroy` with
    keepStorageOnDestroy (retain_on_delete: protect would fail the whole destroy and
    leave the GPU box billing)."""
    child = pulumi.ResourceOptions(parent=parent, retain_on_delete=config.keep_storage_on_destroy)
    # Storage account names are global, 3-24 lowercase letters and digits: the
    # provider appends a random suffix to this logical name.
    account = storage.StorageAccount(
        f"{alnum(name)[:13]}data",
        resource_group_name=group.name,
        location=group.location,
        kind="StorageV2",
        sku={"name": "Standard_LRS"},
        access_tier="Hot",
        enable_https_traffic_only=True,
        minimum_tls_version="TLS1_2",
        allow_blob_public_access=False,
        # Managed identity on the box and `az login` on a laptop cover every use.
        allow_shared_key_access=False,
        default_to_o_auth_authentication=True,
        allow_cross_tenant_replication=False,
        tags=config.storage_tags,
        opts=child,
    )
    storage.BlobServiceProperties(
        f"{name}-blob-recovery",
        resource_group_name=group.name,
        account_name=account.name,
        blob_services_name="default",  # the only name Azure accepts
        is_versioning_enabled=True,
        delete_retention_policy={"enabled": True, "days": DELETED_BLOB_RETENTION_DAYS},
        container_delete_retention_policy={"enabled": True, "days": DELETED_BLOB_RETENTION_DAYS},
        opts=child,
    )
    container = storage.BlobContainer(
        f"{name}-container",
        resource_group_name=group.name,
        account_name=account.name,
        container_name=CONTAINER_NAME,
        public_access="None",
        opts=child,
    )
    storage.ManagementPolicy(
        f"{name}-lifecycle",
        resource_group_name=group.name,
        account_name=account.name,
        management_policy_name="default",  # the only name Azure accepts
        policy={"rules": _lifecycle_rules()},
        opts=child,
    )
    return account, container


def _lifecycle_rules() -> list[dict]:
    stale = {"delete": {"days_after_modification_greater_than": storage_layout.STALE_TMP_DAYS}}
    return [
        {
            "name": "delete-stale-temporaries",
            "enabled": True,
            "type": "Lifecycle",
            "definition": {
                "filters": {
                    "blob_types": ["blockBlob"],
                    "prefix_match": [f"{CONTAINER_NAME}/{storage_layout.TMP_PREFIX}/"],
                },
                "actions": {"base_blob": stale},
            },
        },
        {
            # Versioning protects against a bad overwrite; old versions of checkpoints
            # then age out instead of billing forever.
            "name": "delete-old-versions",
            "enabled": True,
            "type": "Lifecycle",
            "definition": {
                "filters": {"blob_types": ["blockBlob"]},
                "actions": {
                    "version": {"delete": {"days_after_creation_greater_than": OLD_VERSION_DAYS}}
                },
            },
        },
    ]
