"""The job distances (graph edit distance, autotune.store.similarity) of jobs that are
alike and of jobs that are not: the evidence for ``autotune.store.warmstart.MAX_DISTANCE``
(docs/store.md, "Warm start"). Prints one line per pair: model distance, cluster
distance, their sum.

    PYTHONPATH=. python scripts/warm_distances.py
"""

from __future__ import annotations

from torch import nn

from autotune import zoo
from autotune.probes.graph import job_graph
from autotune.store.fingerprint import model_graph
from autotune.store.similarity import Matcher, Summary


def mlp(width: int = 512, depth: int = 4) -> nn.Module:
    """examples/train_mlp.py's model."""
    layers: list[nn.Module] = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def tiny() -> nn.Module:
    """tests/tune_helpers.py's model."""
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 768), nn.ReLU(),
                         nn.Linear(768, 64))


MODELS = {
    "mlp": lambda: mlp(), "mlp-wide": lambda: mlp(1024), "mlp-deep": lambda: mlp(512, 8),
    "tiny": tiny,
    **{n: (lambda n=n: zoo.build(n)) for n in ("resnet50", "resnet101", "vgg16", "bert-base",
                                              "bert-large", "gpt2", "gpt2-medium")},
}
# (machines, workers per machine, servers): a loopback job, small clusters, 32 GPUs
CLUSTERS = {"1x2": (1, 2, 0), "1x2+1s": (1, 2, 1), "1x4": (1, 4, 0), "2x1": (2, 1, 0),
            "2x2": (2, 2, 0), "4x1+2s": (4, 1, 2), "4x1": (4, 1, 0),
            "8x1": (8, 1, 0), "2x8": (2, 8, 0), "4x8": (4, 8, 0), "4x8+2s": (4, 8, 2),
            "8x8": (8, 8, 0)}

PAIRS = [  # (model a, cluster a, model b, cluster b, alike?)
    ("mlp", "1x2", "mlp", "1x2+1s", "alike"),
    ("mlp", "1x2", "mlp", "1x4", "alike"),
    ("mlp", "1x2", "mlp", "2x1", "alike"),
    ("mlp", "2x2", "mlp", "4x1+2s", "alike"),
    ("mlp", "1x2", "mlp-wide", "1x2", "alike"),
    ("mlp", "1x2", "mlp-deep", "1x2", "alike"),
    ("resnet50", "4x8", "resnet101", "4x8", "alike"),
    ("bert-base", "4x8", "bert-large", "4x8", "alike"),
    ("gpt2", "4x8", "gpt2-medium", "4x8", "alike"),
    ("resnet50", "4x8", "resnet50", "4x8+2s", "alike"),
    ("mlp", "2x1", "mlp", "4x1", "alike"),
    ("mlp", "2x1", "mlp", "8x1", "alike"),
    ("resnet50", "4x8", "resnet101", "2x8", "alike"),
    ("resnet50", "4x8", "resnet50", "8x8", "alike"),
    ("mlp", "1x2", "tiny", "1x2", "alike"),
    ("mlp", "1x2", "mlp", "2x2", "unlike"),
    ("mlp", "1x2", "mlp", "4x8", "unlike"),
    ("mlp", "1x2", "resnet50", "1x2", "unlike"),
    ("mlp", "1x2", "resnet50", "4x8", "unlike"),
    ("mlp", "1x2", "bert-base", "4x8+2s", "unlike"),
    ("tiny", "1x2", "gpt2", "4x8", "unlike"),
    ("resnet50", "4x8", "vgg16", "4x8", "unlike"),
    ("resnet50", "4x8", "bert-base", "4x8", "unlike"),
]


def main() -> None:
    graphs = {n: Summary.of(model_graph(f())) for n, f in MODELS.items()}
    clusters = {n: Summary.of(job_graph(*c)) for n, c in CLUSTERS.items()}
    m = Matcher()
    print(f"{'job a':<20} {'job b':<22} {'model':>6} {'cluster':>8} {'job':>6}")
    for ma, ca, mb, cb, kind in PAIRS:
        dm = m.graph_distance(graphs[ma], graphs[mb], timeout=5.0)
        dc = m.graph_distance(clusters[ca], clusters[cb], timeout=5.0)
        print(f"{ma + ' ' + ca:<20} {mb + ' ' + cb:<22} {dm:6.2f} {dc:8.2f} {dm + dc:6.2f}  {kind}")


if __name__ == "__main__":
    main()
