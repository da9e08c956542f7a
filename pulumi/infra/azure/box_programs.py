"""The box programs' archive in the stack's Blob container, uploaded with the deployer's token.

A new box fetches it at first boot (box/bootstrap.py) with its managed identity. The
account takes no shared key, which azure-native's own Blob resource needs, so this
small dynamic resource uploads it through `stack.blob_upload` with the deployer's
Azure AD token (azure-identity: `az login`, a service principal's environment...);
the deployer's Storage Blob Data Contributor grant comes first (`depends_on`).

The key names the archive's sha256, so new programs are a new blob. Deleting leaves
the blob: a box whose user data pins an older build can still fetch it, and the
container goes with the stack (unless keepStorageOnDestroy). Like the AWS spot guard,
the provider class is built inside a function so Pulumi ships it by value.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi import dynamic

from stack import storage_layout
from stack.box_packing import Programs


class BoxProgramsBlob(dynamic.Resource, module="glucose-training", name="BoxProgramsBlob"):
    """`programs` as a block blob in `account`/`container`."""

    def __init__(
        self,
        name: str,
        account: pulumi.Input[str],
        container: pulumi.Input[str],
        programs: Programs,
        opts: pulumi.ResourceOptions,
    ) -> None:
        props = {
            "account": account,
            "container": container,
            "key": storage_layout.box_programs_key(programs.sha256),
            "sha256": programs.sha256,
            "archive": programs.text,
        }
        super().__init__(blob_provider(), name, props, opts)


def blob_provider() -> dynamic.ResourceProvider:
    """Create uploads; a changed key replaces; delete keeps the blob (module docstring)."""

    class BoxProgramsBlobProvider(dynamic.ResourceProvider):
        def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
            import os

            from azure.identity import DefaultAzureCredential

            from stack.blob_upload import STORAGE_SCOPE, blob_endpoint, put_blob

            credential = DefaultAzureCredential(exclude_interactive_browser_credential=True)
            put_blob(
                os.environ.get("GLUCOSE_BLOB_ENDPOINT") or blob_endpoint(props["account"]),
                props["container"],
                props["key"],
                props["archive"].encode("ascii"),
                lambda: credential.get_token(STORAGE_SCOPE).token,
            )
            return dynamic.CreateResult(
                f"{props['account']}/{props['container']}/{props['key']}", props
            )

        def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
            changed = [k for k in ("account", "container", "key") if olds.get(k) != news.get(k)]
            return dynamic.DiffResult(changes=bool(changed), replaces=changed)

        def delete(self, _id: str, _props: dict[str, Any]) -> None:
            return None

    return BoxProgramsBlobProvider()
