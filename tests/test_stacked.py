"""The stacked forward/backward of many clients: each client's gradient is autograd's, layer by layer."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

from reshuffle.clients import build_model
from reshuffle.clients.stacked import StackedNet
from reshuffle.errors import ConfigError


def _autograd_grads(net, x, y):
    loss = F.cross_entropy(net(x), y)
    return dict(zip([k for k, _ in net.named_parameters()], torch.autograd.grad(loss, list(net.parameters()))))


def _images(rng, n, shape, zero_share):
    # Zero regions like MNIST's background make exact ties inside pooling windows.
    x = rng.normal(size=(n, *shape))
    x[rng.random(size=x.shape) < zero_share] = 0.0
    return x


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from(["lenet5", "mlp", "logreg"]), seed=st.integers(0, 2**16),
       sizes=st.lists(st.integers(0, 6), min_size=1, max_size=3), zero_share=st.sampled_from([0.0, 0.7, 1.0]))
def test_stacked_gradients_are_each_clients_autograd_gradients(model, seed, sizes, zero_share):
    # Prepare: float64 so only a real difference shows; clients of different sizes padded to one batch
    torch.set_default_dtype(torch.float64)
    try:
        rng = np.random.default_rng(seed)
        C, B = len(sizes), max(max(sizes), 1)
        nets = [build_model(model, (1, 28, 28), 10, seed=seed + c).double() for c in range(C)]
        x = torch.from_numpy(_images(rng, C * B, (1, 28, 28), zero_share)).view(C, B, 1, 28, 28)
        y = torch.from_numpy(rng.integers(0, 10, size=(C, B)))
        w = torch.tensor([[1.0] * n + [0.0] * (B - n) for n in sizes])
        params = {k: torch.stack([dict(n.named_parameters())[k].detach() for n in nets])
                  for k, _ in nets[0].named_parameters()}
        # Execute
        got = StackedNet(nets[0]).gradients(params, x, y, w)
    finally:
        torch.set_default_dtype(torch.float32)
    # Assert: every parameter of every client, against autograd on that client's real samples
    assert sorted(got) == sorted(params)
    for c, n in enumerate(sizes):
        if n == 0:  # a client with no sample this step: an exactly zero gradient
            assert all(torch.count_nonzero(got[k][c]) == 0 for k in got)
            continue
        ref = _autograd_grads(nets[c], x[c, :n], y[c, :n])
        for k in got:
            assert got[k][c].shape == ref[k].shape
            assert torch.allclose(got[k][c], ref[k], rtol=1e-10, atol=1e-12), (k, c)


def test_pooling_ties_route_to_the_first_maximum_like_max_pool2d():
    # Prepare: one LeNet-5 client whose input is constant, so every pooling window is a tie
    torch.set_default_dtype(torch.float64)
    try:
        net = build_model("lenet5", (1, 28, 28), 10, seed=1).double()
        with torch.no_grad():
            net.conv1.bias.fill_(0.3)  # positive ties after the first convolution
        x = torch.full((1, 2, 1, 28, 28), 0.5)
        y = torch.tensor([[3, 7]])
        params = {k: v.detach().unsqueeze(0) for k, v in net.named_parameters()}
        # Execute
        got = StackedNet(net).gradients(params, x, y, torch.ones(1, 2))
    finally:
        torch.set_default_dtype(torch.float32)
    # Assert
    ref = _autograd_grads(net, x[0], y[0])
    assert torch.count_nonzero(ref["conv1.weight"]) > 0
    for k in ref:
        assert torch.allclose(got[k][0], ref[k], rtol=1e-10, atol=1e-12), k


def test_stacked_net_refuses_other_models_and_odd_pooling():
    with pytest.raises(ConfigError, match="no stacked form for Sequential"):
        StackedNet(torch.nn.Sequential(torch.nn.Linear(4, 2)))
    assert not StackedNet.supports(torch.nn.Conv2d(1, 1, 3))
    from reshuffle.clients.stacked import PoolReLU

    with pytest.raises(ConfigError, match="even sides, got 5×6"):
        PoolReLU().forward({}, torch.zeros(1, 1, 5, 6, 1))
