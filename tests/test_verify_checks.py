"""The shared per-file video checks on hand-made probes (no video needed): counts per span, pts
grid, the frame rate from the median interval, v3.0 span coverage."""

from __future__ import annotations

from pipeline.video.checks import (
    Span,
    VideoExpect,
    check_coverage,
    check_probe,
    in_span,
    inspect_probe,
    nominal_fps,
)
from pipeline.video.probe import VideoProbe

FPS = 30.0


def probe(pts: list[float], keyframes: list[float] | None = None, header: int | None = None,
          size: tuple[int, int] = (224, 224)) -> VideoProbe:
    keys = pts if keyframes is None else keyframes
    return VideoProbe(path="x.mp4", bytes=1000, codec="h264", width=size[0], height=size[1], pix_fmt="yuv420p",
                      fps=len(pts) / (pts[-1] + 1 / FPS), frames_from_header=len(pts) if header is None else header,
                      frames_from_packets=len(pts), keyframes=len(keys), duration_s=pts[-1] + 1 / FPS,
                      pts_s=tuple(pts), keyframe_pts_s=tuple(keys), packet_bytes=tuple([10] * len(pts)))


def grid(n: int, start: int = 0) -> list[float]:
    return [(start + i) / FPS for i in range(n)]


def test_two_spans_counted_separately_and_a_gap_blamed_on_its_episode() -> None:
    pts = grid(90) + grid(89, 91)  # episode 1 lost its first frame
    spans = [Span(0, 0.0, 3.0, 90), Span(1, 3.0, 6.0, 90)]
    result = inspect_probe(probe(pts), VideoExpect(fps=FPS, all_intra=True), spans, camera="cam")
    assert [(c.episode, c.frames_from_packets, c.keyframes) for c in result.spans] == [(0, 90, 90), (1, 89, 89)]
    assert {(f.episode, f.check) for f in result.failures} == {(1, "frames_from_packets"), (1, "pts_grid")}
    assert check_probe(probe(pts), VideoExpect(fps=FPS), spans, camera="cam") == [
        f for f in result.failures if f.check != "keyframes"]


def test_frame_rate_comes_from_the_median_interval_not_the_average() -> None:
    pts = [*grid(179), 180 / FPS]  # one missing frame moves the average rate, not the median
    assert abs(nominal_fps(probe(pts)) - FPS) < 1e-9
    assert abs(nominal_fps(probe(grid(90)[::2])) - FPS / 2) < 1e-9
    failures = check_probe(probe(grid(90)[::2]), VideoExpect(fps=FPS), [Span(0, 0.0, None, 45)])
    assert [f.check for f in failures] == ["fps", "pts_grid"]


def test_header_size_and_keyframes() -> None:
    p = probe(grid(90), keyframes=grid(90)[::30], header=92, size=(640, 480))
    failures = check_probe(p, VideoExpect(fps=FPS, size=(224, 224), all_intra=True), [Span(3, 0.0, None, 90)])
    assert [(f.check, f.expected, f.found, f.episode) for f in failures] == [
        ("frames_from_header", "90 (frames_from_packets)", "92", 3),
        ("size", "224x224", "640x480", 3),
        ("keyframes", "90 (every frame)", "3", 3),
    ]


def test_coverage_finds_frames_no_span_claims() -> None:
    spans = [Span(0, 0.0, 3.0, 90), Span(1, 3.0, 6.0, 90)]
    assert check_coverage(probe(grid(180)), spans) == []
    [f] = check_coverage(probe(grid(181)), spans, camera="cam")
    assert (f.check, f.episode, f.camera, f.found) == ("frames_outside_spans", 1, "cam", "1 (first at 6.000000 s)")


def test_in_span_tolerance() -> None:
    span = Span(0, 3.0, 6.0, 90)
    assert in_span(3.0 - 5e-5, span) and not in_span(3.0 - 2e-4, span)
    assert in_span(6.0 - 2e-4, span) and not in_span(6.0 - 5e-5, span)
    assert in_span(1e9, Span(0, 0.0, None, None))
