import pytest
import torch
import torch.nn.functional as F

from trainer import config
from trainer.config import ModelConfig
from trainer.model import FORMULATIONS, build_model, count_parameters, default_formulation

RESNET34_1D_PARAMS = 7_218_753  # torchvision's ResNet34 mapped to 1-D, kernel 3


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


@pytest.mark.parametrize("saved", FORMULATIONS)
def test_a_checkpoint_of_one_formulation_loads_into_every_other(saved):
    state = build_model(ModelConfig(arch="resnet18"), formulation=saved).state_dict()
    for formulation in FORMULATIONS:
        model = build_model(ModelConfig(arch="resnet18"), formulation=formulation)
        model.load_state_dict(state)
        shapes = {name: tensor.shape for name, tensor in model.state_dict().items()}
        assert shapes == {name: tensor.shape for name, tensor in state.items()}


@pytest.mark.parametrize("formulation", ["gemm", "nhwc"])
def test_a_formulation_computes_the_conv1d_network_and_its_gradients(formulation):
    # In float64: the formulations differ by float32 rounding (and on one CPU thread,
    # torch 2.13's float32 channels-last kernels gave nhwc other input gradients, which
    # is why the trainer runs nhwc on GPUs only), not by what they compute.
    torch.manual_seed(0)
    conv = build_model(ModelConfig(arch="resnet18", dropout=0.0), formulation="torch").double()
    other = build_model(ModelConfig(arch="resnet18", dropout=0.0), formulation=formulation)
    other.double().load_state_dict(conv.state_dict())
    x, y = torch.randn(6, 1, 75, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    outputs = []
    for model in (conv, other):
        out = model.train()(x)
        F.mse_loss(out, y).backward()
        outputs.append(out.detach())
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-10, atol=1e-12)
    reference = dict(conv.named_parameters())
    for name, parameter in other.named_parameters():
        torch.testing.assert_close(parameter.grad, reference[name].grad, rtol=1e-9, atol=1e-11)


def test_nhwc_weights_are_channels_last_conv2d_weights_as_cudnn_takes_them():
    model = build_model(ModelConfig(arch="resnet18"), formulation="nhwc")
    conv = model.stages[1][0].conv1
    assert conv.weight.unsqueeze(2).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_the_prediction_is_fp32_under_bf16_autocast_not_rounded_to_bf16(formulation):
    # bf16 has 8 bits of mantissa: a prediction of ~150 mg/dL would move in steps of 0.5.
    model = build_model(ModelConfig(arch="resnet18"), formulation=formulation).eval()
    x = torch.randn(4, 1, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        features = model.dropout(model.stages(model.stem(model.enter(x))).mean(model.length_dim))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, model.head(features.flatten(1).float()).squeeze(1))


def test_cpu_trains_the_gemm_formulation_and_a_gpu_cudnns_conv1d():
    assert default_formulation(torch.device("cpu")) == "gemm"
    assert default_formulation(torch.device("cuda")) == "torch"


def test_the_cli_offers_every_formulation_and_auto():
    # trainer.config spells them out so the command line parses without torch.
    assert set(config.FORMULATIONS) == {"auto", *FORMULATIONS}


def test_an_unknown_formulation_is_refused_by_name():
    with pytest.raises(ValueError, match="'im2row'"):
        build_model(ModelConfig(arch="resnet18"), formulation="im2row")
