from pathlib import Path

import pytest

from trainer.config import UserError
from trainer.loop.device import (
    check_arch_supported,
    choose_device,
    refuse_cpu_on_a_gpu_machine,
    resolve_precision,
)


def test_v100_without_sm70_kernels_is_refused_with_a_fix():
    with pytest.raises(UserError, match=r"sm_70.*CUDA 12"):
        check_arch_supported((7, 0), ["sm_80", "sm_90", "sm_100"])


def test_gpu_listed_in_the_arch_list_is_accepted():
    check_arch_supported((9, 0), ["sm_80", "sm_90"])


def test_newer_gpu_runs_through_ptx_of_an_older_arch():
    check_arch_supported((12, 0), ["sm_90", "compute_90"])


def test_auto_precision_on_cpu_is_fp32():
    assert choose_device("auto").precision == "fp32"


def test_fp16_on_cpu_is_a_user_error():
    with pytest.raises(UserError, match="fp16 needs a GPU"):
        choose_device("fp16")


def test_arch_specific_kernels_run_only_on_that_arch():
    check_arch_supported((9, 0), ["sm_90a"])
    with pytest.raises(UserError):
        check_arch_supported((10, 0), ["sm_90a"])


def test_sass_of_another_major_does_not_count():
    with pytest.raises(UserError):
        check_arch_supported((8, 0), ["sm_75", "sm_90"])


@pytest.mark.parametrize("capability", [(7, 0), (7, 5)])
def test_auto_precision_on_v100_and_t4_is_fp16_not_their_emulated_bf16(capability):
    assert resolve_precision("auto", capability) == "fp16"


@pytest.mark.parametrize("capability", [(8, 0), (8, 6), (9, 0), (10, 0)])
def test_auto_precision_from_ampere_on_is_bf16(capability):
    assert resolve_precision("auto", capability) == "bf16"


def test_bf16_asked_of_a_gpu_without_native_bf16_is_refused_naming_fp16():
    with pytest.raises(UserError, match=r"sm_75.*--precision fp16"):
        resolve_precision("bf16", (7, 5))


def _gpu_box(root: Path, *paths: str) -> Path:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).touch()
    return root


def test_a_machine_with_nvidia_gpus_whose_cuda_does_not_start_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    root = _gpu_box(tmp_path, "dev/nvidia0", "dev/nvidiactl")
    with pytest.raises(UserError, match=r"NVIDIA GPUs are present.*dev/nvidia0.*--gpus all"):
        refuse_cpu_on_a_gpu_machine(root)


def test_the_drivers_gpu_list_counts_in_a_container_started_without_gpus(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    root = _gpu_box(tmp_path, "proc/driver/nvidia/gpus/0000:00:1e.0/information")
    with pytest.raises(UserError, match="CUDA does not start: Torch not compiled with CUDA"):
        refuse_cpu_on_a_gpu_machine(root)


def test_gpus_hidden_by_cuda_visible_devices_leave_the_cpu_to_train(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    refuse_cpu_on_a_gpu_machine(_gpu_box(tmp_path, "dev/nvidia0"))


def test_a_machine_without_nvidia_gpus_trains_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    refuse_cpu_on_a_gpu_machine(_gpu_box(tmp_path, "dev/null", "dev/nvme0"))
    assert choose_device("auto").device.type == "cpu"


def test_gpu_memory_figure_is_none_on_the_cpu():
    assert choose_device("auto").peak_memory_gib() is None
