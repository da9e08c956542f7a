import pytest
import torch
import torch.nn.functional as F

from trainer.config import ModelConfig
from trainer.model import build_model, count_parameters, default_formulation

RESNET34_1D_PARAMS = 7_218_753  # FACTS.md: torchvision mapping, kernel 3
FORMULATIONS = ("gemm", "torch")


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_resnet34_has_the_torchvision_mapping_parameter_count(formulation):
    model = build_model(ModelConfig(arch="resnet34"), formulation=formulation)
    assert count_parameters(model) == RESNET34_1D_PARAMS


def test_resnet18_is_smaller_from_the_same_code():
    assert count_parameters(build_model(ModelConfig(arch="resnet18"))) < RESNET34_1D_PARAMS


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("length", [32, 100, 257])
def test_forward_maps_batch_of_windows_to_one_value_each(formulation, length):
    model = build_model(ModelConfig(arch="resnet18"), formulation=formulation).eval()
    with torch.no_grad():
        out = model(torch.randn(3, 1, length))
    assert out.shape == (3,)


def test_a_checkpoint_of_one_formulation_loads_into_the_other():
    gemm = build_model(ModelConfig(arch="resnet18"), formulation="gemm")
    conv = build_model(ModelConfig(arch="resnet18"), formulation="torch")
    conv.load_state_dict(gemm.state_dict())
    gemm.load_state_dict(conv.state_dict())
    shapes = {name: tensor.shape for name, tensor in conv.state_dict().items()}
    assert shapes == {name: tensor.shape for name, tensor in gemm.state_dict().items()}


def test_gemm_formulation_computes_the_conv1d_network_and_its_gradients():
    torch.manual_seed(0)
    conv = build_model(ModelConfig(arch="resnet18", dropout=0.0), formulation="torch")
    gemm = build_model(ModelConfig(arch="resnet18", dropout=0.0), formulation="gemm")
    gemm.load_state_dict(conv.state_dict())
    x, y = torch.randn(6, 1, 75), torch.randn(6)
    outputs = []
    for model in (conv, gemm):
        out = model.train()(x)
        F.mse_loss(out, y).backward()
        outputs.append(out.detach())
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-4, atol=1e-4)
    reference = dict(conv.named_parameters())
    for name, parameter in gemm.named_parameters():
        torch.testing.assert_close(parameter.grad, reference[name].grad, rtol=1e-3, atol=1e-4)


def test_cpu_trains_the_gemm_formulation_and_a_gpu_cudnns_conv1d():
    assert default_formulation(torch.device("cpu")) == "gemm"
    assert default_formulation(torch.device("cuda")) == "torch"


def test_an_unknown_formulation_is_refused_by_name():
    with pytest.raises(ValueError, match="'im2row'"):
        build_model(ModelConfig(arch="resnet18"), formulation="im2row")
