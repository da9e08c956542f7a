import pytest
import torch

from trainer.config import ModelConfig
from trainer.model import build_model, count_parameters

RESNET34_1D_PARAMS = 7_218_753  # FACTS.md: torchvision mapping, kernel 3


def test_resnet34_has_the_torchvision_mapping_parameter_count():
    assert count_parameters(build_model(ModelConfig(arch="resnet34"))) == RESNET34_1D_PARAMS


def test_resnet18_is_smaller_from_the_same_code():
    assert count_parameters(build_model(ModelConfig(arch="resnet18"))) < RESNET34_1D_PARAMS


@pytest.mark.parametrize("length", [32, 100, 257])
def test_forward_maps_batch_of_windows_to_one_value_each(length):
    model = build_model(ModelConfig(arch="resnet18")).eval()
    with torch.no_grad():
        out = model(torch.randn(3, 1, length))
    assert out.shape == (3,)
