"""Our items equal the real LeRobotDataset's items (as openpi builds it) on the same 224 all-intra data.

Needs `lerobot`: run inside its venv, e.g.
    HF_HUB_OFFLINE=1 PYTHONPATH=. /opt/prep-venvs/lerobot-v30/bin/python -m pytest tests/test_loader_lerobot.py
lerobot >= 0.4 reads format v3.0, older releases v2.1; the corpus follows the installed version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lerobot", reason="needs the real lerobot package (a reader venv: .ci/lerobot_envs.sh)")
torch = pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")

from pipeline.loader.dataset import PrepFrameDataset  # noqa: E402
from pipeline.loader.lerobot_source import LeRobotItems, lerobot_version  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

pytestmark = [pytest.mark.readers, pytest.mark.slow]


def _format() -> str:
    major_minor = tuple(int(p) for p in (lerobot_version() or "0.4").split(".")[:2])
    return "v3.0" if major_minor >= (0, 4) else "v2.1"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version=_format(), episodes=3, frames=20, height=224, width=224, gop=1, episodes_per_file=2)
    return write_synthetic(tmp_path_factory.mktemp("lerobot") / "corpus", spec)


@pytest.mark.parametrize("backend", ["pyav", None])
def test_items_match_lerobot(corpus: Path, backend: str | None) -> None:
    ours = PrepFrameDataset(corpus, horizon=8)
    theirs = LeRobotItems(corpus, horizon=8, video_backend=backend)
    assert len(ours) == len(theirs) == 60
    for i in (0, 7, 12, 19, 20, 39, 40, 59):
        a, b = ours[i], theirs[i]
        for key, value in a.items():
            if key.startswith("_"):
                continue
            assert torch.equal(value, b[key]), f"item {i} {key} (backend {theirs.video_backend})"
