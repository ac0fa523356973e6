"""The model zoo: well-known models generated from code, for their gradient shapes.

Offline tuning (``autotune tune``), the simulator and the benchmarks need the gradients of
real models without downloading anything. :func:`build` makes one (on the ``meta`` device
by default: shapes only, no memory), :func:`gradient_shapes` lists its gradients in the
order backward produces them, and a user's own model comes in as a ``"pkg.module:attr"``
factory (:func:`load_factory`).

Built-in names (see :func:`names`): resnet50, resnet101, vgg16, bert-base, bert-large,
gpt2, gpt2-medium, gpt2-xl, transformer-base. Layouts follow torchvision / Hugging Face /
Vaswani et al.; see :mod:`autotune.zoo.vision` and :mod:`autotune.zoo.text`.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from autotune.errors import AutotuneError, did_you_mean

from . import text, vision

__all__ = [
    "ModelSpec", "ZooError", "build", "example_inputs", "gradient_shapes", "load_factory",
    "names", "resolve", "spec", "synthetic_loss",
]


class ZooError(AutotuneError, ValueError):
    """An unknown model name or a factory that cannot be loaded."""


@dataclass(frozen=True)
class ModelSpec:
    """A zoo entry: its factory, what kind of input it takes, and a one-line summary."""

    name: str
    factory: Callable[..., nn.Module]
    inputs: str  # "image", "tokens" or "seq2seq"
    summary: str


_SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec("resnet50", vision.resnet50, "image", "ResNet-50 (torchvision layout), 25.6M"),
        ModelSpec("resnet101", vision.resnet101, "image", "ResNet-101 (torchvision layout), 44.5M"),
        ModelSpec("vgg16", vision.vgg16, "image", "VGG-16 (torchvision layout), 138.4M"),
        ModelSpec("bert-base", text.bert_base, "tokens", "BERT-base encoder + pooler, 109.5M"),
        ModelSpec("bert-large", text.bert_large, "tokens", "BERT-large encoder + pooler, 335.1M"),
        ModelSpec("gpt2", text.gpt2_small, "tokens", "GPT-2 small (tied LM head), 124.4M"),
        ModelSpec("gpt2-medium", text.gpt2_medium, "tokens", "GPT-2 medium (tied LM head), 354.8M"),
        ModelSpec("gpt2-xl", text.gpt2_xl, "tokens", "GPT-2 XL (tied LM head), 1557.6M"),
        ModelSpec("transformer-base", text.transformer_base, "seq2seq",
                  "Transformer base (Vaswani et al.), shared 37k vocab, 63.1M"),
    )
}

_ALIASES = {
    "resnet-50": "resnet50", "resnet-101": "resnet101", "vgg-16": "vgg16",
    "bert": "bert-base", "bert-base-uncased": "bert-base", "bert-large-uncased": "bert-large",
    "gpt2-small": "gpt2", "gpt-2": "gpt2", "gpt-2-small": "gpt2", "gpt-2-medium": "gpt2-medium",
    "gpt-2-xl": "gpt2-xl",
    "transformer": "transformer-base",
}


def names() -> list[str]:
    """The built-in model names."""
    return list(_SPECS)


def resolve(name: str) -> str:
    """The canonical zoo name of ``name`` (case, ``_`` vs ``-`` and aliases forgiven),
    with its base width where it gives one: ``resnet50/16`` is ResNet-50 with base width
    16 (the same 161 tensors at a quarter of the channels), for the models that have a
    ``base_width`` (the ResNets and VGG-16)."""
    base, sep, width = str(name).strip().partition("/")
    key = base.lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in _SPECS:
        raise ZooError(
            f"unknown model {name!r}{did_you_mean(key, names() + list(_ALIASES))}; "
            f"built-in models are {', '.join(names())} "
            f"(or give a factory as 'package.module:attr')")
    if not sep:
        return key
    if not width.isdigit() or int(width) < 1:
        raise ZooError(f"model {name!r}: the width after '/' is a whole number >= 1 "
                       f"(resnet50/16), got {width!r}")
    if "base_width" not in inspect.signature(_SPECS[key].factory).parameters:
        widths = [n for n, s in _SPECS.items()
                  if "base_width" in inspect.signature(s.factory).parameters]
        raise ZooError(f"model {name!r}: {key} has no base width to set ('NAME/WIDTH' is for "
                       f"{', '.join(widths)})")
    return f"{key}/{int(width)}"


def spec(name: str) -> ModelSpec:
    return _SPECS[resolve(name).partition("/")[0]]


def is_factory_spec(name: str) -> bool:
    """Whether ``name`` names a user factory (``"pkg.module:attr"``) rather than a zoo entry."""
    return ":" in str(name)


def load_factory(target: str) -> Callable[..., nn.Module]:
    """Import ``"package.module:attr"`` (``attr`` may be dotted) and return the callable.

    Raises :class:`ZooError` saying what is wrong: a malformed string, a module that does
    not import, a missing attribute, or something not callable.
    """
    if not isinstance(target, str) or target.count(":") != 1:
        raise ZooError(f"a model factory is given as 'package.module:attr', got {target!r}")
    module_name, attr = (part.strip() for part in target.split(":"))
    if not module_name or not attr:
        raise ZooError(f"a model factory is given as 'package.module:attr', got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ZooError(f"cannot import module {module_name!r} of factory {target!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ZooError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ZooError(f"{target!r} is a {type(obj).__name__}, not a callable that builds a model")
    return obj


def build(name: str, device: str | torch.device = "meta", **kwargs: Any) -> nn.Module:
    """A zoo model (or a user factory's, for ``"pkg.module:attr"``) built on ``device``.

    On the ``meta`` device (the default) parameters have shapes but no storage, so even
    GPT-2 medium costs no memory. ``kwargs`` go to the factory (e.g. ``num_classes`` for
    the image models, ``layers``/``hidden`` for the transformers).
    """
    if is_factory_spec(name):
        factory = load_factory(name)
    else:
        key, _, width = resolve(name).partition("/")
        factory = _SPECS[key].factory
        kwargs = {**({"base_width": int(width)} if width else {}), **kwargs}
    with torch.device(device):
        model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise ZooError(f"factory {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def module_gradient_shapes(model: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of every trainable parameter of ``model``, in backward-ready order.

    Backward produces gradients roughly in reverse order of the parameters' registration
    (the last layer first), which is also the order DDP buckets assume; parameters shared
    between modules appear once, under their first name.
    """
    params = [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]
    return params[::-1]


def gradient_shapes(name: str, **kwargs: Any) -> list[tuple[str, tuple[int, ...]]]:
    """The gradients of a zoo model or a ``"pkg.module:attr"`` factory, in ready order."""
    return module_gradient_shapes(build(name, device="meta", **kwargs))


def example_inputs(name: str, batch_size: int = 2, seq_len: int = 128,
                   image_size: int = 224, device: str | torch.device = "cpu",
                   model: nn.Module | None = None) -> tuple[torch.Tensor, ...]:
    """Random inputs for a zoo model's ``forward`` (a tuple to splat into the call)."""
    s = spec(name)
    gen = torch.Generator().manual_seed(0)
    if s.inputs == "image":
        return (torch.randn(batch_size, 3, image_size, image_size, generator=gen).to(device),)
    vocab = getattr(model, "vocab", None) or 1000
    ids = torch.randint(0, vocab, (batch_size, seq_len), generator=gen).to(device)
    if s.inputs == "seq2seq":
        tgt = torch.randint(0, vocab, (batch_size, seq_len), generator=gen).to(device)
        return ids, tgt
    return (ids,)


def synthetic_loss(output: torch.Tensor | tuple | list) -> torch.Tensor:
    """A scalar that depends on every output tensor (the mean of each, summed), so
    backward reaches every parameter whatever the model returns."""
    if isinstance(output, torch.Tensor):
        return output.float().mean()
    parts = [synthetic_loss(o) for o in output if isinstance(o, (torch.Tensor, tuple, list))]
    if not parts:
        raise ZooError("the model's output holds no tensor to build a loss from")
    return torch.stack(parts).sum()
