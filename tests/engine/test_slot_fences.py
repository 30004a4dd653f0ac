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


def test_work_on_another_stream_waits_for_a_slots_last_step_once():
    fences = SlotFences()
    fences.record(_plan(0, frame_slots=(0, 1), chunk_slots=(2,)), "main", {"step": "e0"})
    fences.record(_plan(1, frame_slots=(1,)), "main", {"step": "e1", "codec": "codec1"})
    assert fences.take_foreign(0, "main") == ()  # the same stream: its order does it
    assert fences.take_foreign(0, "lane") == ("e0",)  # frame rows
    assert fences.take_foreign(2, "prefill") == ("e0",)  # chunks: the codec state is written there
    assert fences.take_foreign(1, "lane") == ("e1", "codec1")  # the latest step, with its codec stream's event
    assert fences.take_foreign(1, "lane") == ()  # taken: the new work, and what follows it there, comes after
    assert fences.take_foreign(5, "lane") == ()  # never used


def test_a_step_without_chunks_keeps_the_codec_streams_earlier_end():
    """With the codec on its own stream, a step with a slot's chunk and then a step with only its frame
    row: the codec stream's event of the first is still waited for (the second's is not past it)."""
    fences = SlotFences()
    fences.record(_plan(0, frame_slots=(4,), chunk_slots=(4,)), "main", {"step": "e0", "codec": "codec0"})
    fences.record(_plan(1, frame_slots=(4,)), "main", {"step": "e1"})
    assert fences.take_foreign(4, "lane") == ("e1", "codec0")


def test_a_lane_steps_slot_fences_the_main_stream():
    """A stream cancelled in the newcomer lane frees its slot while its lane steps may be in flight:
    the next owner's work on the main stream waits for them, prefills included."""
    fences = SlotFences()
    fences.record(_plan(0, prefill_slots=(3,), frame_slots=(3,)), "lane", {"step": "lane0"})
    assert fences.take_foreign(3, "lane") == ()
    assert fences.take_foreign(3, "main") == ("lane0",)


def test_the_prefill_stream_needs_cuda(tiny_checkpoint):
    with pytest.raises(ValueError, match="prefill_stream: a CUDA stream of its own needs a CUDA device, not cpu"):
        StreamingEngine(tiny_checkpoint, device="cpu", prefill_stream=True)
