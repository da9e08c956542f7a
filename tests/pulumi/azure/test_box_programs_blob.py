"""Azure: `pulumi up` puts the box programs in a storage account that refuses shared keys.

The provider runs as Pulumi's provider host runs it, with the deployer's token from
azure-identity (an `az` on PATH that answers as a logged-in Azure CLI does), against
Azurite taking Azure AD tokens only.
"""

from __future__ import annotations

import urllib.error
import urllib.parse

import pytest

from infra.azure.box_programs import blob_provider
from stack import box_packing, storage_layout
from stack.blob_upload import BlobUploadError, put_blob
from tests.fakes.provider_host import run_in_provider_host

FAKE_AZ = """#!/bin/sh
# `az account get-access-token --output json --resource R`, as a logged-in CLI answers.
cat <<'EOF'
{"accessToken": "TOKEN", "expiresOn": "2099-01-01 00:00:00.000000",
 "expires_on": 4070908800, "tokenType": "Bearer"}
EOF
"""


def _props(container: str) -> dict:
    programs = box_packing.build_programs()
    return {
        "account": "devstoreaccount1",
        "container": container,
        "key": storage_layout.box_programs_key(programs.sha256),
        "sha256": programs.sha256,
        "archive": programs.text,
    }


@pytest.mark.e2e
def test_the_archive_reaches_a_keyless_account_with_the_deployers_token(keyless_blob, tmp_path):
    container = keyless_blob.create_container()
    az = tmp_path / "bin" / "az"
    az.parent.mkdir()
    az.write_text(FAKE_AZ.replace("TOKEN", keyless_blob.token()))
    az.chmod(0o755)
    env = {
        "PATH": f"{az.parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GLUCOSE_BLOB_ENDPOINT": keyless_blob.endpoint,
        "SSL_CERT_FILE": str(keyless_blob.ca_file),
    }
    props = _props(container)
    created = run_in_provider_host(blob_provider(), "create", props, env=env, cwd=tmp_path)
    assert created["id"] == f"devstoreaccount1/{container}/{props['key']}"
    stored = keyless_blob.request("GET", f"{container}/{urllib.parse.quote(props['key'])}")
    assert stored == box_packing.build_programs().archive


@pytest.mark.e2e
def test_an_upload_waits_for_a_new_grant_to_reach_the_data_plane(keyless_blob, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(keyless_blob.ca_file))
    container = keyless_blob.create_container()
    # Refused twice (as while a role assignment propagates), then let in.
    tokens = iter([keyless_blob.token("https://management.azure.com/")] * 2)
    pauses = []
    put_blob(
        keyless_blob.endpoint,
        container,
        "box/programs-x.tar",
        b"archive",
        lambda: next(tokens, keyless_blob.token()),
        sleep=pauses.append,
    )
    assert len(pauses) == 2
    assert keyless_blob.request("GET", f"{container}/box/programs-x.tar") == b"archive"


@pytest.mark.e2e
def test_an_upload_refused_past_its_wait_says_so(keyless_blob, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(keyless_blob.ca_file))
    container = keyless_blob.create_container()
    with pytest.raises(BlobUploadError, match="HTTP 403"):
        put_blob(
            keyless_blob.endpoint,
            container,
            "box/programs-x.tar",
            b"archive",
            lambda: keyless_blob.token("https://management.azure.com/"),
            wait_seconds=0,
        )
    with pytest.raises(urllib.error.HTTPError):
        keyless_blob.request("GET", f"{container}/box/programs-x.tar")


def test_new_programs_replace_the_blob_and_deleting_keeps_it():
    provider = blob_provider()
    old = _props("training")
    new = {**old, "key": "box/programs-other.tar", "sha256": "other"}
    assert provider.diff("id", old, new).replaces == ["key"]
    assert provider.diff("id", old, dict(old)).changes is False
    assert provider.delete("id", old) is None
