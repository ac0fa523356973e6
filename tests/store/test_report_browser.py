"""The HTML report opened in a real headless browser (issue 28): a real tuning run on the
simulator, ``autotune report RUN --out x.html``, a screenshot by Debian's ``chromium``,
and the figure the page embeds found, pixel for pixel, in the screenshot.

Skips where there is no ``chromium`` (CI has none: ``apt-get install chromium``)."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from store_helpers import tune_simulated

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1200, 1600


def _browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    return found


def _find(shot, fig, max_y: int = 700, max_x: int = 120) -> tuple[int, int]:
    """Where ``fig`` (H x W x 3) sits in ``shot``: the offset at which its busiest row
    matches best (smallest mean absolute difference)."""
    import numpy as np

    gray = fig.mean(axis=2)
    row = int(np.argmax((gray < 0.9).sum(axis=1)))  # an axes frame or a dense curve
    sig = fig[row]
    w = sig.shape[0]
    best = (np.inf, 0, 0)
    for y in range(row, min(row + max_y, shot.shape[0])):
        for x in range(0, min(max_x, shot.shape[1] - w) + 1):
            d = float(np.abs(shot[y, x:x + w] - sig).mean())
            if d < best[0]:
                best = (d, y - row, x)
    return best[1], best[2]


def test_the_html_report_shows_its_plot_in_a_real_browser(tmp_path):
    browser = _browser()
    pytest.importorskip("matplotlib")
    import matplotlib.image as mpimg
    import numpy as np

    db = tmp_path / "runs.db"
    rid = tune_simulated(db, tmp_path, budget=30)
    page = tmp_path / "x.html"
    r = CliRunner().invoke(cli, ["report", str(rid), "--db", str(db), "--out", str(page)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    (embedded,) = re.findall(r'src="data:image/png;base64,([^"]+)"', page.read_text())
    fig = mpimg.imread(io.BytesIO(base64.b64decode(embedded)), format="png")[..., :3]

    shot_path = tmp_path / "shot.png"
    proc = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot_path}",
         f"--window-size={WIDTH},{HEIGHT}", page.as_uri()],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert shot_path.exists(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    shot = mpimg.imread(shot_path)[..., :3]
    assert shot.shape[:2] == (HEIGHT, WIDTH)

    # not a blank page: the figure's many colours are there
    colours = {tuple(p) for p in (shot * 255).round().astype(np.uint8).reshape(-1, 3)}
    assert len(colours) > 200, len(colours)

    # the embedded figure, unscaled (it is narrower than the page), is in the screenshot:
    # every pixel of it that the window shows matches
    assert fig.shape[1] < WIDTH - 80
    dy, dx = _find(shot, fig)
    h = min(fig.shape[0], HEIGHT - dy)
    assert h > fig.shape[0] // 2, (dy, fig.shape)  # most of the figure is on screen
    diff = np.abs(shot[dy:dy + h, dx:dx + fig.shape[1]] - fig[:h])
    assert float(diff.mean()) < 0.01 and float((diff.max(axis=2) > 0.05).mean()) < 0.005
    # and what matched is the plot, not white on white: its dark ink and colours
    region = shot[dy:dy + h, dx:dx + fig.shape[1]]
    assert float((region.mean(axis=2) < 0.5).mean()) > 0.005
    assert len({tuple(p) for p in (region * 255).round().astype(np.uint8).reshape(-1, 3)}) > 100
