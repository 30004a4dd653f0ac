"""The engine thread's start-up before it is ready: every CUDA graph captured (the runner's frame
steps and prefills, the codec's chunk shapes), then one codec call, so that the
first stream pays for none of it. What the codec capture kept and dropped goes into the engine stats."""

from __future__ import annotations

import logging
import time

import torch

from ..runtime.codec_runner import CodecRunner
from ..runtime.progress import Phase, kernel_caches
from ..runtime.progress import log as startup_log
from ..runtime.runner import ModelRunner

log = logging.getLogger(__name__)


def warm_up(runner: ModelRunner, codec_runner: CodecRunner, stats: dict[str, float]) -> None:
    started = time.monotonic()
    if runner.device.type == "cuda":
        startup_log.info("start-up: kernel caches %s", kernel_caches())
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
    with Phase("first codec call", 1) as phase:
        codec_runner.decode([0], torch.zeros(1, 16, 2, dtype=torch.long))
        codec_runner.reset(0)
        phase.step()
    startup_log.info("start-up: warm-up done in %.1f s", time.monotonic() - started)
