"""Models by name, plug-in models, ResNet-18 against the published architecture, and the flat vector's contents."""

import numpy as np
import pytest
import torch
from torch import nn

from reshuffle.clients import FlatLayout, build_model, get_flat, model_names, register_model, set_flat
from reshuffle.clients.models import ResNet18, _init_resnet, torchvision_resnet18
from reshuffle.errors import ConfigError


class BNNet(nn.Module):
    """A convolution, BatchNorm and a linear layer: parameters, float buffers and an integer buffer."""

    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(input_shape[0], 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * input_shape[1] * input_shape[2], num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def test_builtin_models_are_named_without_torch_and_each_name_builds():
    import subprocess
    import sys

    # Listing and checking names (a command's help, a configuration's validation) imports no torch
    code = ("import sys; from reshuffle.clients import check_model_name, model_names; check_model_name('lenet5'); "
            "print(','.join(model_names()), 'torch' in sys.modules)")
    names, torch_loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                         check=True).stdout.split()
    assert torch_loaded == "False" and {"logreg", "mlp", "lenet5", "cnn", "resnet18"} <= set(names.split(","))
    for name in ("logreg", "mlp", "lenet5", "cnn"):
        assert isinstance(build_model(name, (1, 28, 28), 10), nn.Module)


def test_plugin_model_is_built_by_name_under_the_seed():
    name = "test-models-bnnet"
    if name not in model_names():
        register_model(name)(BNNet)
    a, b = build_model(name, (1, 8, 8), 3, seed=4), build_model(name, (1, 8, 8), 3, seed=4)
    assert isinstance(a, BNNet) and np.array_equal(get_flat(a), get_flat(b))
    assert not np.array_equal(get_flat(a), get_flat(build_model(name, (1, 8, 8), 3, seed=5)))
    with pytest.raises(ConfigError, match="already registered"):
        register_model(name)(BNNet)


def test_bad_plugin_models_are_refused():
    if "test-models-none" not in model_names():
        register_model("test-models-none")(lambda shape, k: None)
        register_model("test-models-empty")(lambda shape, k: nn.ReLU())
    with pytest.raises(ConfigError, match="returned NoneType, not a torch.nn.Module"):
        build_model("test-models-none", (1, 8, 8), 10)
    with pytest.raises(ConfigError, match="no floating-point parameters or buffers"):
        build_model("test-models-empty", (1, 8, 8), 10)
    with pytest.raises(ConfigError, match="name must be a non-empty string without spaces"):
        register_model("two words")(BNNet)
    with pytest.raises(ConfigError, match="unknown model 'resnet'; choose one of .*resnet18"):
        build_model("resnet", (3, 32, 32), 10)


def test_cnn_has_the_fedavg_papers_parameter_count():
    # McMahan et al. (2017): "a CNN with two 5x5 convolution layers ... (1,663,370 total parameters)" on MNIST.
    assert get_flat(build_model("cnn", (1, 28, 28), 10)).size == 1_663_370
    m = build_model("cnn", (3, 32, 32), 10)
    assert get_flat(m).size == 2_156_490 and m(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def _params(m):
    return sum(p.numel() for p in m.parameters())


def test_resnet18_matches_the_published_cifar_architecture():
    m = build_model("resnet18", (3, 32, 32), 10)
    # 11,173,962 parameters (torchvision's 11,689,512 less the 7x7 stem and the 1000-class head), plus the
    # running mean and variance of its 20 BatchNorm layers (4,800 channels) in the flat vector.
    assert _params(m) == 11_173_962
    layout = FlatLayout.of(m)
    assert layout.size == 11_173_962 + 2 * 4_800
    assert [n for n in layout.local] == [n for n in m.state_dict() if n.endswith("num_batches_tracked")]
    assert len(layout.local) == 20
    # The CIFAR stem: 3x3 stride 1, no max-pooling; the stages halve the side from 32 to 4.
    assert tuple(m.conv1.weight.shape) == (64, 3, 3, 3) and m.conv1.stride == (1, 1)
    shapes = []
    hooks = [getattr(m, f"layer{i}").register_forward_hook(lambda mod, i, o: shapes.append(tuple(o.shape[1:])))
             for i in range(1, 5)]
    assert m(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    for h in hooks:
        h.remove()
    assert shapes == [(64, 32, 32), (128, 16, 16), (256, 8, 8), (512, 4, 4)]
    # torchvision's module names, so its weights load into this model and back.
    keys = list(m.state_dict())
    assert keys[:6] == ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                        "bn1.num_batches_tracked"]
    assert "layer2.0.downsample.0.weight" in keys and "layer1.0.downsample.0.weight" not in keys
    assert keys[-2:] == ["fc.weight", "fc.bias"]
    # One-channel input (FEMNIST) changes only the stem.
    assert _params(build_model("resnet18", (1, 28, 28), 62)) == 11_173_962 - 2 * 9 * 64 + 52 * 513


def test_resnet18_init_is_torchvisions_scheme():
    m = build_model("resnet18", (3, 32, 32), 10, seed=1)
    w = m.layer3[0].conv2.weight.detach()
    # Kaiming normal, fan_out mode: std = sqrt(2 / (out_channels * 3 * 3)).
    assert abs(float(w.std()) - (2 / (256 * 9)) ** 0.5) < 0.002
    assert torch.all(m.layer3[0].bn2.weight == 1) and torch.all(m.layer3[0].bn2.bias == 0)


tv = torchvision_resnet18((3, 32, 32), 10)


@pytest.mark.skipif(tv is None, reason="torchvision does not import beside this torch build")
def test_resnet18_equals_torchvisions_builder_where_torchvision_imports():
    torch.manual_seed(7)
    theirs = _init_resnet(torchvision_resnet18((3, 32, 32), 10))
    torch.manual_seed(7)
    ours = _init_resnet(ResNet18((3, 32, 32), 10))
    a, b = theirs.state_dict(), ours.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randn(3, 3, 32, 32)
    assert torch.allclose(theirs.eval()(x), ours.eval()(x), atol=1e-5)


def test_flat_vector_holds_batchnorm_statistics_and_leaves_integer_buffers_local():
    m = BNNet((1, 8, 8), 3)
    layout = FlatLayout.of(m)
    assert layout.names == ("conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                            "fc.weight", "fc.bias")
    assert layout.local == ("bn.num_batches_tracked",)
    m.train()(torch.randn(5, 1, 8, 8))  # moves the running statistics
    W = get_flat(m)
    stats = W[4 * 9 + 4 + 8 : 4 * 9 + 4 + 16]
    assert np.array_equal(stats, torch.cat([m.bn.running_mean, m.bn.running_var]).numpy())
    other = BNNet((1, 8, 8), 3)
    set_flat(other, W)
    assert torch.equal(other.bn.running_var, m.bn.running_var) and other.bn.num_batches_tracked == 0
    W[0] = 123.0
    assert float(other.conv.weight.view(-1)[0]) != 123.0  # no aliasing of the caller's array


def test_fedbn_keeps_every_batchnorm_entry_local():
    m = BNNet((1, 8, 8), 3)
    layout = FlatLayout.of(m, local_bn=True)
    assert "bn.running_mean" not in layout.names and "bn.weight" not in layout.names
    assert set(layout.local) == {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                                 "bn.num_batches_tracked"}
    assert layout.size == FlatLayout.of(m).size - 16
    local = layout.get_local(m)
    local["bn.running_mean"] += 1.0
    layout.set_local(m, local)
    assert torch.equal(m.bn.running_mean, torch.ones(4))
    with pytest.raises(ConfigError, match="local state holds"):
        layout.set_local(m, {})


def test_tied_weights_are_carried_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    m = Tied()
    assert FlatLayout.of(m).names == ("a.weight", "a.bias", "b.bias")
    W = get_flat(m) * 0 + 2
    set_flat(m, W)
    assert torch.all(m.b.weight == 2)


def test_fedavg_of_flat_vectors_averages_batchnorm_statistics():
    # Two clients' models that saw different data: the mean of their flat vectors is the model whose
    # running statistics are the mean of theirs (what FedAvg of the state does).
    a, b = BNNet((1, 8, 8), 3), BNNet((1, 8, 8), 3)
    b.load_state_dict(a.state_dict())
    a.train()(torch.randn(16, 1, 8, 8))
    b.train()(torch.randn(16, 1, 8, 8) * 3 + 1)
    avg = BNNet((1, 8, 8), 3)
    set_flat(avg, (get_flat(a) + get_flat(b)) / 2)
    assert torch.allclose(avg.bn.running_mean, (a.bn.running_mean + b.bn.running_mean) / 2)
    assert torch.allclose(avg.bn.running_var, (a.bn.running_var + b.bn.running_var) / 2)
