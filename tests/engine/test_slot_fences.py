"""SlotFences: what a new stream's prefill on the prefill stream waits for (StepExecutor). The CUDA
side (the waits themselves, a prefill beside steps in flight) is tests/gpu/test_engine_gpu.py's
prefill-stream engine; here the bookkeeping, with stand-in events."""

from __future__ import annotations

import pytest

from tts_engine.engine.core import StreamingEngine
from tts_engine.engine.executor import SlotFences
from tts_engine.scheduler.plan import Chunk, ChunkBatch, FrameBatch, FrameRow, Prefill, StepPlan


def _plan(step_id, frame_slots=(), chunk_slots=(), prefill_slots=()):
    rows = tuple(FrameRow(f"s{slot}", slot, 3, 20, 0) for slot in frame_slots)
    chunks = (ChunkBatch(2, tuple(Chunk(f"s{slot}", slot, 1, 2) for slot in chunk_slots)),) if chunk_slots else ()
    return StepPlan(step_id, tuple(Prefill(f"p{slot}", slot, 12) for slot in prefill_slots),
                    FrameBatch(rows, len(rows)) if rows else None, chunks)


def test_a_prefill_waits_for_its_slots_last_step_once():
    fences = SlotFences()
    fences.record(_plan(0, frame_slots=(0, 1), chunk_slots=(2,), prefill_slots=(3,)), "e0")
    fences.record(_plan(1, frame_slots=(1,)), "e1")
    assert fences.take(0) == "e0"  # frame rows
    assert fences.take(2) == "e0"  # chunks: the codec state is written there
    assert fences.take(3) == "e0"  # a prefill: the slot's KV cache
    assert fences.take(1) == "e1"  # the latest step that touched it
    assert fences.take(1) is None  # taken: the new work, and what follows it there, comes after
    assert fences.take(5) is None  # never used


def test_the_prefill_stream_needs_cuda(tiny_checkpoint):
    with pytest.raises(ValueError, match="prefill_stream: a CUDA stream of its own needs a CUDA device, not cpu"):
        StreamingEngine(tiny_checkpoint, device="cpu", prefill_stream=True)
