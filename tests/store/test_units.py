"""autotune.units: the one place numbers are formatted for people."""

from __future__ import annotations

import pytest

from autotune.units import (fmt_bytes, fmt_config, fmt_number, fmt_score, fmt_seconds,
                            fmt_value, shown_params, unit_of)


@pytest.mark.parametrize("n, text", [(67108864, "64 MiB"), (4 << 20, "4 MiB"), (65536, "64 KiB"),
                                     (1536, "1.5 KiB"), (100, "100 B"), (0, "0 B"),
                                     (3 << 30, "3 GiB"), (None, "")])
def test_bytes(n, text):
    assert fmt_bytes(n) == text


def test_numbers_scores_and_times():
    assert fmt_number(3759.2) == "3,759" and fmt_number(390000.0) == "390,000"
    assert fmt_number(12.54) == "12.5" and fmt_number(0.01234) == "0.0123" and fmt_number(0) == "0"
    assert fmt_score(3759.2, "samples/s") == "3,759 samples/s"
    assert fmt_score(3759.2, "samples/s", 41.4) == "3,759 ± 41.4 samples/s"
    assert fmt_score(4.0, unit_of(None), 0.5) == "4 ± 0.5 ?"  # unknown unit (old runs) says so
    assert fmt_score(4.0) == "4"
    assert fmt_score(None, "it/s") == ""
    assert fmt_seconds(0.0123) == "12.3 ms" and fmt_seconds(1.94) == "1.94 s"
    assert fmt_seconds(125) == "2 min 5 s" and fmt_seconds(7300) == "2 h 1 min"


def test_config_values_and_only_the_parameters_that_matter():
    assert fmt_value("chunk_bytes", 67108864) == "64 MiB"
    assert fmt_value("chunk_bytes", 67108864, compact=True) == "64MiB"
    assert fmt_value("streams", 4) == "4"
    cfg = {"transport": "allreduce", "streams": 4, "chunk_bytes": 1 << 26, "servers": 0,
           "intra": "scatter", "reduce_root": 0, "compression": "none", "compress_min_bytes": 1024}
    # reduce_root only under intra=root, servers only under pushpull, codec knobs under a codec
    assert list(shown_params(cfg)) == ["streams", "chunk_bytes", "transport", "intra", "compression"]
    assert fmt_config(cfg) == ("streams=4 chunk_bytes=64MiB transport=allreduce intra=scatter "
                               "compression=none")
    cfg.update(intra="root", transport="pushpull", servers=2, compression="topk", topk_ratio=0.01)
    assert list(shown_params(cfg)) == ["streams", "chunk_bytes", "transport", "servers", "intra",
                                       "reduce_root", "compression", "topk_ratio",
                                       "compress_min_bytes"]
    assert shown_params(None) == {} and fmt_config({}) == ""
