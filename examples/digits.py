"""scikit-learn's bundled handwritten digits (1,797 real 8x8 scans, on every machine with
scikit-learn, no download) and the small classifier the framework examples train on them
(``train_lightning.py``, ``train_accelerate.py``; examples/ is on their path)."""

from __future__ import annotations

import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset


def digits() -> TensorDataset:
    """64 pixel intensities (0-16, scaled to 0-1) -> the digit 0-9."""
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    return TensorDataset(x, torch.tensor(data.target, dtype=torch.long))


def classifier() -> nn.Module:
    """A 3-layer perceptron over the 64 pixels."""
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))
