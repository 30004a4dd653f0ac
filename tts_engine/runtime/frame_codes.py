"""Every slot's frame codes from the frame step until their codec chunk, in one device buffer.

A frame step's codes go in with one copy and a codec call's come out with one gather, whatever the
number of streams: no per-stream tensors, stacks or padding on the engine thread's hot path. A row is
addressed by (slot, frame index); a frame index is below the context length (each frame takes a
position), so no row is overwritten before its stream is done with it, and a slot's next stream writes
its own frames before it reads them.
"""

from __future__ import annotations

import torch

from .host import to_device


class FrameCodes:
    def __init__(self, slots: int, frames: int, codebooks: int, device: torch.device):
        self.frames = frames
        self.buf = torch.zeros(slots * frames, codebooks, dtype=torch.long, device=device)

    def keep(self, slots: list[int], frames: list[int], codes: torch.Tensor) -> None:
        """codes [B, Q]: row i is frame frames[i] of the stream in slot slots[i]. Stream-ordered on CUDA, so
        a graph's static output may be passed: it is read before the next replay overwrites it."""
        n = self.frames
        if max(frames) >= n:  # the intake caps a stream's frames below the context; past it rows would alias
            raise ValueError(f"frame {max(frames)} is past the {n} a slot holds")
        self.buf.index_copy_(0, to_device([s * n + f for s, f in zip(slots, frames)], self.buf.device), codes)

    def take(self, slots: list[int], firsts: list[int], counts: list[int], t: int) -> torch.Tensor:
        """[B, Q, t]: frames firsts[i] .. firsts[i] + counts[i] - 1 of slot slots[i], a count short of t
        padded with copies of its last frame."""
        n = self.frames
        rows = [s * n + f + min(j, c - 1) for s, f, c in zip(slots, firsts, counts) for j in range(t)]
        out = self.buf.index_select(0, to_device(rows, self.buf.device))
        return out.view(len(slots), t, -1).transpose(1, 2)
