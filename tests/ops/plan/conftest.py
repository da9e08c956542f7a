"""Fixtures of the price tests: AWS credentials that reach only local fakes, and what
offline looks like."""

import socket

import pytest


@pytest.fixture
def aws_credentials(monkeypatch, tmp_path):
    """Dummy credentials and no user config: boto3 must talk only to the fake."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_PRICING", "AWS_ENDPOINT_URL_EC2"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def closed_port_url():
    """A 127.0.0.1 URL where nothing listens: what offline looks like, instantly."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
