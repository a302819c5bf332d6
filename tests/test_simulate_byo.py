"""Bring your own model, data and hardware: plug-ins, BatchNorm federated as FedAvg would, CIFAR-10 with
ResNet-18 and FEMNIST by writer on files in their real formats, devices."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from data_helpers import write_cifar10, write_femnist
from reshuffle.cli import main
from reshuffle.run import checkpoint
from reshuffle.run.config import SimConfig
from reshuffle.sim.simulator import Simulation

PLUGIN_DIR = Path(__file__).resolve().parent.parent / "examples" / "byo"


@pytest.fixture
def byo(monkeypatch):
    """The example plug-in module (a BatchNorm CNN and a dataset made from numpy arrays), importable."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    return "byo_plugin"


def test_the_plugin_example_is_twenty_lines():
    assert len((PLUGIN_DIR / "byo_plugin.py").read_text().splitlines()) <= 20


def test_plugin_model_and_dataset_run_with_a_rule_aware_attack_and_the_default_rule(byo, tmp_path, capsys):
    # Execute: the command docs/usage.md shows
    rc = main(["simulate", "--plugin", byo, "--model", "bn-cnn", "--dataset", "blobs", "--attack", "agr-tailored",
               "--malicious", "0.2", "--rule", "default", "--clients", "10", "--rounds", "2", "--shuffle", "ideal",
               "--quiet", "--out", str(tmp_path)])
    # Assert: both rounds ran over the attackers' crafted rows; the model's BatchNorm statistics are in δ
    assert rc == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert data["config"]["model"] == "bn-cnn" and data["config"]["rule"] == "default"
    assert [r["malicious_rows"] for r in data["rounds"]] == [2, 2]
    assert all(r["skipped"] is None for r in data["rounds"]) and data["final_accuracy"] > 0.25
    # conv 1*9*8 + 8, BatchNorm weight, bias, running mean and variance 4 * 8, linear 8*16*4 + 4
    assert data["model_size"] == 80 + 32 + 516 and data["device"] == "cpu"


def _bn_sim(byo, **kw) -> Simulation:
    __import__(byo)
    return Simulation(SimConfig(dataset="blobs", model="bn-cnn", clients=4, set_size=4, rounds=2, shuffle="ideal",
                                rule="fedavg", batch_size=32, **kw))


def _slots(sim: Simulation, name: str) -> slice:
    at = 0
    for n, shape in zip(sim.training.layout.names, sim.training.layout.shapes):
        k = int(np.prod(shape))
        if n == name:
            return slice(at, at + k)
        at += k
    raise KeyError(name)


@pytest.mark.parametrize("training", ["sequential", "batched"])
def test_batchnorm_statistics_change_the_global_model_as_fedavg_of_them(byo, training):
    # Prepare: keep the clients' models of round 1
    sim = _bn_sim(byo, training=training)
    trained = {}
    train = sim.training.train

    def keep(T, who, W_g):
        out = train(T, who, W_g)
        trained.update(out[0])
        return out

    sim.training.train = keep
    W0 = sim.W_g.copy()
    # Execute
    sim.step()
    # Assert: the new running mean and variance are the mean of the clients' (to the encoding's precision)
    clients = np.stack([trained[i] for i in range(4)])
    for name in ("1.running_mean", "1.running_var", "1.weight", "0.weight"):
        s = _slots(sim, name)
        assert not np.allclose(clients[:, s], W0[s])  # training moved them
        assert np.abs(sim.W_g[s] - clients[:, s].mean(0)).max() < 1e-4
    # The integer buffer stays with each client: 7 batches of up to 32 counted by each (200 samples each).
    assert [int(sim.training.local[i]["1.num_batches_tracked"]) for i in range(4)] == [7, 7, 7, 7]
    assert "1.num_batches_tracked" not in sim.training.layout.names


def test_local_batchnorm_keeps_each_clients_own(byo):
    sim = _bn_sim(byo, local_bn=True)
    sim.step()
    assert "1.running_mean" not in sim.training.layout.names
    means = [sim.training.local[i]["1.running_mean"] for i in range(4)]
    assert not torch.allclose(means[0], means[1])  # each client's statistics, from its own data
    assert sim.step().accuracy > 0.25  # evaluated with each client's own BatchNorm, averaged


def test_a_resumed_run_keeps_the_clients_local_state(byo, tmp_path):
    whole = _bn_sim(byo, local_bn=True)
    whole.run()
    first = _bn_sim(byo, local_bn=True)
    records = [first.step()]
    ck = checkpoint.simulation_checkpoint(first, records)
    again = _bn_sim(byo, local_bn=True)
    checkpoint.restore_simulation(again, ck)
    again.run(records=records)
    assert np.array_equal(again.W_g, whole.W_g)
    assert all(torch.equal(again.training.local[i][k], whole.training.local[i][k]) for i in range(4) for k in whole.training.local[i])


def test_cifar10_with_resnet18_on_the_binary_files(tmp_path, capsys):
    # ResNet-18 costs 0.56 GFLOP per 32x32 image forward: 5 training images (one per file), 3 and 2 per client.
    write_cifar10(tmp_path / "cifar10", per_file=1, test=2)
    rc = main(["simulate", "--dataset", "cifar10", "--data-dir", str(tmp_path / "cifar10"), "--model", "resnet18",
               "--clients", "2", "--no-stable-sets", "--rounds", "1", "--batch-size", "3", "--shuffle", "ideal",
               "--quiet",
               "--out", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert data["model_size"] == 11_173_962 + 9_600 and data["rounds"][0]["models_received"] == 2
    assert data["rounds"][0]["eval_samples"] == 2


def test_femnist_by_writer_on_leaf_files(tmp_path, capsys):
    write_femnist(tmp_path / "femnist", writers=6, per_writer=5)
    rc = main(["simulate", "--dataset", "femnist", "--data-dir", str(tmp_path / "femnist"), "--partition", "natural",
               "--model", "cnn", "--clients", "3", "--set-size", "3", "--rounds", "1", "--shuffle", "ideal", "--quiet",
               "--out", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    sim = Simulation(SimConfig(dataset="femnist", data_dir=str(tmp_path / "femnist"), partition="natural",
                               model="logreg", clients=3, set_size=3, rounds=1, shuffle="ideal"))
    writers = [set(sim.data.natural_ids[p].tolist()) for p in sim.training.parts]
    assert all(len(w) == 1 for w in writers) and len(set.union(*writers)) == 3  # one whole writer per client
    assert [len(p) for p in sim.training.parts] == [5, 5, 5]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_is_refused_clearly_without_cuda(tmp_path, capsys):
    rc = main(["simulate", "--device", "cuda", "--rounds", "1", "--quiet", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "device 'cuda' requested, but CUDA is not available on this machine" in err
    assert not (tmp_path / "metrics.json").exists()


def test_natural_partition_needs_natural_ids(tmp_path, capsys):
    rc = main(["simulate", "--partition", "natural", "--rounds", "1", "--quiet", "--out", str(tmp_path)])
    assert rc == 2 and "dataset 'digits' has no natural ids" in capsys.readouterr().err
