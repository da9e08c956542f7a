"""How the watchdog stops billing on each cloud, and the AWS GPU metric."""

import pytest

from tests.fixtures.metadata import AZURE_RESOURCE_ID
from tests.infra.box_fakes import FakeBox

T0 = 1_800_000_000.0
IDLE_LIMIT_MINUTES = 2
LIMIT_SECONDS = IDLE_LIMIT_MINUTES * 60


def _box(tmp_path, fake_metadata, cloud):
    return FakeBox(
        tmp_path,
        cloud=cloud,
        metadata_url=fake_metadata.url,
        idle_shutdown_minutes=IDLE_LIMIT_MINUTES,
    )


def _idle_past_the_limit(box):
    box.tick(T0)
    return box.tick(T0 + LIMIT_SECONDS)


@pytest.fixture
def azure_box(tmp_path, fake_metadata):
    return _box(tmp_path, fake_metadata, "azure")


def test_azure_deallocates_the_vm_through_arm(azure_box, fake_metadata):
    _idle_past_the_limit(azure_box)
    assert fake_metadata.deallocated == [AZURE_RESOURCE_ID]
    assert azure_box.calls("shutdown") == []
    assert azure_box.watchdog_state()["stop_method"] == "azure-deallocate"


def test_azure_deallocate_names_the_api_version(azure_box, fake_metadata):
    _idle_past_the_limit(azure_box)
    (call,) = [seen for seen in fake_metadata.requests if seen.path.startswith("/subscriptions/")]
    assert call.method == "POST"
    assert call.path == f"{AZURE_RESOURCE_ID}/deallocate?api-version=2024-07-01"


def test_azure_token_is_asked_for_arm_with_the_metadata_header(azure_box, fake_metadata):
    _idle_past_the_limit(azure_box)
    (call,) = [seen for seen in fake_metadata.requests if "/identity/" in seen.path]
    assert "resource=https%3A%2F%2Fmanagement.azure.com%2F" in call.path
    assert call.headers["metadata"] == "true"


def test_arm_refusal_falls_back_to_os_shutdown_loudly(azure_box, fake_metadata):
    fake_metadata.arm_status = 403
    done = _idle_past_the_limit(azure_box)
    assert azure_box.calls("shutdown") == [["-h", "now"]]
    assert "STILL BILLED" in done.stdout
    assert "HTTP 403" in done.stdout
    assert azure_box.watchdog_state()["stop_method"] == "os-shutdown"


def test_missing_identity_falls_back_to_os_shutdown(azure_box, fake_metadata):
    fake_metadata.identity_status = 400
    done = _idle_past_the_limit(azure_box)
    assert azure_box.calls("shutdown") == [["-h", "now"]]
    assert "ERROR: Azure deallocate failed" in done.stdout


def test_unreachable_metadata_falls_back_to_os_shutdown(tmp_path):
    box = FakeBox(tmp_path, cloud="azure", idle_shutdown_minutes=IDLE_LIMIT_MINUTES)
    _idle_past_the_limit(box)
    assert box.calls("shutdown") == [["-h", "now"]]


def test_aws_stops_with_an_os_shutdown(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    _idle_past_the_limit(box)
    assert box.calls("shutdown") == [["-h", "now"]]
    assert fake_metadata.deallocated == []


def test_aws_publishes_gpu_utilization_to_cloudwatch(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    box.set_gpu(12, 88)
    box.tick(T0)
    assert box.calls("aws") == [
        [
            "cloudwatch",
            "put-metric-data",
            "--region",
            "eu-west-1",
            "--namespace",
            "GlucoseTraining",
            "--metric-name",
            "GPUUtilization",
            "--dimensions",
            "InstanceId=i-0123456789abcdef0",
            "--unit",
            "Percent",
            "--value",
            "88",
        ]
    ]


def test_aws_metric_uses_an_imdsv2_token(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    box.tick(T0)
    token_put, *reads = fake_metadata.requests
    assert (token_put.method, token_put.path) == ("PUT", "/latest/api/token")
    assert [seen.headers.get("x-aws-ec2-metadata-token") for seen in reads] == [
        "fake-imds-token",
        "fake-imds-token",
    ]


def test_azure_publishes_no_cloudwatch_metric(azure_box):
    azure_box.set_gpu(50)
    azure_box.tick(T0)
    assert azure_box.calls("aws") == []


def test_no_gpu_metric_without_nvidia_smi(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    box.set_gpu(None)
    box.tick(T0)
    assert box.calls("aws") == []
