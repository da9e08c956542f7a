import pytest

from trainer.config import UserError
from trainer.loop.device import check_arch_supported, choose_device


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
