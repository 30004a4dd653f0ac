"""FrameCodes: a step's codes kept by (slot, frame) and gathered into a codec call's [B, Q, t]."""

from __future__ import annotations

import pytest
import torch

from tts_engine.runtime.frame_codes import FrameCodes


def step_codes(step: int, rows: int) -> torch.Tensor:
    return torch.arange(rows * 16).view(rows, 16) + 1000 * step


def test_take_returns_each_slots_frames_in_order_with_the_last_frame_repeated():
    fc = FrameCodes(slots=4, frames=32, codebooks=16, device=torch.device("cpu"))
    kept = {}
    for step in range(5):  # slots 3 and 1 advance together, one frame a step, from different frame indices
        codes = step_codes(step, 2)
        fc.keep([3, 1], [10 + step, step], codes)
        kept[3, 10 + step], kept[1, step] = codes[0].clone(), codes[1].clone()
        codes.zero_()  # the caller's buffer is reused (a graph's static output): its values were copied
    out = fc.take([1, 3], [1, 12], [4, 2], t=4)
    assert out.shape == (2, 16, 4)
    want1 = torch.stack([kept[1, f] for f in (1, 2, 3, 4)], dim=1)
    want3 = torch.stack([kept[3, f] for f in (12, 13, 13, 13)], dim=1)  # a short final chunk, padded
    assert torch.equal(out[0], want1) and torch.equal(out[1], want3)


def test_a_slots_next_stream_reads_its_own_frames():
    fc = FrameCodes(slots=2, frames=8, codebooks=16, device=torch.device("cpu"))
    fc.keep([0], [0], step_codes(0, 1))
    fc.keep([0], [0], step_codes(7, 1))  # the slot's next stream, frame 0 again
    assert torch.equal(fc.take([0], [0], [1], t=1)[0, :, 0], step_codes(7, 1)[0])


def test_a_frame_past_the_buffer_is_refused():
    fc = FrameCodes(slots=2, frames=8, codebooks=16, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="past the 8"):
        fc.keep([0], [8], step_codes(0, 1))  # it would land on slot 1's frame 0
