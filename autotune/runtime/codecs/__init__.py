"""Gradient codecs with error feedback and selective compression (the HiPress paper, SOSP 2021).

See ``docs/compression.md``. The runtime uses: :func:`codec_from_config`, a codec's
``encode / decode / pack / unpack / payload_numel / summable / after_sum``,
:func:`decode_sum`, :class:`ErrorFeedback` and :func:`codec_for_chunk`.
"""

from autotune.runtime.codecs.base import (Codec, Context, IdentityCodec, Payload, averaged_payloads, decode_aggregate,
                   decode_sum, sum_packed)
from autotune.runtime.codecs.feedback import ErrorFeedback, Segments, whole
from autotune.runtime.codecs.fp16 import BF16Codec, FP16Codec
from autotune.runtime.codecs.onebit import OneBitCodec
from autotune.runtime.codecs.powersgd import PowerSGDCodec
from autotune.runtime.codecs.randomk import RandomKCodec
from autotune.runtime.codecs.registry import CODECS, codec_from_config, compress_min_bytes, make_codec
from autotune.runtime.codecs.selective import codec_for_chunk, compresses
from autotune.runtime.codecs.topk import TopKCodec

__all__ = [
    "BF16Codec", "CODECS", "Codec", "Context", "ErrorFeedback", "FP16Codec", "IdentityCodec",
    "OneBitCodec", "Payload", "PowerSGDCodec", "RandomKCodec", "Segments", "TopKCodec",
    "codec_for_chunk", "codec_from_config", "compress_min_bytes",
    "averaged_payloads", "compresses", "decode_aggregate", "decode_sum", "make_codec",
    "sum_packed", "whole",
]
