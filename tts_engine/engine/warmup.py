"""The engine thread's start-up before it is ready: every CUDA graph captured (the runner's frame
steps and prefills, the codec's chunk shapes), then one codec call, so that the
first stream pays for none of it. What the codec capture kept and dropped goes into the engine stats."""

from __future__ import annotations

import logging

import torch

from ..runtime.codec_runner import CodecRunner
from ..runtime.runner import ModelRunner

log = logging.getLogger(__name__)


def warm_up(runner: ModelRunner, codec_runner: CodecRunner, stats: dict[str, float]) -> None:
    if runner.use_graphs:
        runner.capture_graphs()
    if codec_runner.use_graphs:
        report = codec_runner.capture()
        # A graph that replayed wrong is dropped and its shape runs eagerly (~3-10x slower): say so.
        stats["codec_graphs"] = len(report["captured"])
        stats["codec_graphs_dropped"] = len(report["mismatched"]) + len(report["skipped"])
        level = logging.WARNING if stats["codec_graphs_dropped"] else logging.INFO
        log.log(level, "codec graphs: %d captured, skipped %s, mismatched %s, max error %.2e, %.0f s",
                len(report["captured"]), report["skipped"], report["mismatched"], report["max_error"],
                report["seconds"])
    codec_runner.decode([0], torch.zeros(1, 16, 2, dtype=torch.long))
    codec_runner.reset(0)
