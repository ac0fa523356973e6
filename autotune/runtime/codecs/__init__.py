"""Gradient codecs with error feedback and selective compression (the HiPress paper, SOSP 2021).

See ``docs/compression.md``. The runtime uses: :func:`codec_from_config`, a codec's
``encode / decode / pack / unpack / payload_numel / summable / after_sum``,
:func:`decode_sum`, :class:`ErrorFeedback` and :func:`codec_for_chunk`.
"""

from .base import (Codec, Context, IdentityCodec, Payload, averaged_payloads, decode_aggregate,
                   decode_sum, sum_packed)
from .feedback import ErrorFeedback, Segments, whole
from .fp16 import BF16Codec, FP16Codec
from .onebit import OneBitCodec
from .powersgd import PowerSGDCodec
from .randomk import RandomKCodec
from .registry import CODECS, codec_from_config, compress_min_bytes, make_codec
from .selective import codec_for_chunk, compresses
from .topk import TopKCodec

__all__ = [
    "BF16Codec", "CODECS", "Codec", "Context", "ErrorFeedback", "FP16Codec", "IdentityCodec",
    "OneBitCodec", "Payload", "PowerSGDCodec", "RandomKCodec", "Segments", "TopKCodec",
    "codec_for_chunk", "codec_from_config", "compress_min_bytes",
    "averaged_payloads", "compresses", "decode_aggregate", "decode_sum", "make_codec",
    "sum_packed", "whole",
]
