"""dropin: the model, the data and the training loop (as in Flower's PyTorch template)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from reshuffle.clients import load_dataset, partition


class Net(nn.Module):
    """A small MLP for 8×8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


_cache: dict = {}


def load_data(partition_id: int, num_partitions: int) -> tuple[DataLoader, DataLoader]:
    """This node's IID share of the digits training set, and the test set."""
    if "ds" not in _cache:
        _cache["ds"] = load_dataset("digits")  # embedded: no download
    ds = _cache["ds"]
    idx = partition(ds.y_train, num_partitions, "iid", seed=0)[partition_id]
    g = torch.Generator().manual_seed(partition_id)
    train = TensorDataset(torch.from_numpy(ds.x_train[idx]), torch.from_numpy(ds.y_train[idx].astype(np.int64)))
    test = TensorDataset(torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test.astype(np.int64)))
    return DataLoader(train, batch_size=16, shuffle=True, generator=g), DataLoader(test, batch_size=128)


def train(net: Net, trainloader: DataLoader, epochs: int, lr: float, device: str) -> float:
    """Train the model on the training set; return the mean training loss."""
    net.to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for x, y in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net: Net, testloader: DataLoader, device: str) -> tuple[float, float]:
    """Validate the model on the test set: (loss, accuracy)."""
    net.to(device)
    criterion = nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    net.eval()
    with torch.no_grad():
        for x, y in testloader:
            out = net(x.to(device))
            loss += criterion(out, y.to(device)).item()
            correct += (out.argmax(1) == y.to(device)).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)
