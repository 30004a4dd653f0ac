"""Early first audio: which of a step's first chunks may be sent before the step is read.

The executor launches a step's codec calls that hold a stream's first chunk ahead of its other calls
and records `LaunchedStep.early_event` after them, so their PCM (and the step's codebook-0 ids) are
on the host while the rest of the step still runs. A chunk goes early only if the step's result
cannot change it: no EOS among its frames (read from the step's own codebook 0, or known from an
earlier step), not the stream's last audio (its `final` flag comes from the result), and its stream
still there with nothing decoded yet.
"""

from __future__ import annotations

from ..scheduler.plan import AudioReady
from .entry import StreamEntry
from .executor import LaunchedStep


def early_first_chunks(launched: LaunchedStep, entries: dict[str, StreamEntry],
                       eos_id: int | None) -> list[tuple[StreamEntry, AudioReady]]:
    """Call after `launched.wait_early()`: (entry, its AudioReady) per first chunk that may be sent
    now; its PCM is row `row` of `launched.host_pcm(batch)`. eos_id None: EOS never ends a stream
    (random weights)."""
    plan = launched.plan
    rows = {r.stream_id: i for i, r in enumerate(plan.frames.rows)} if plan.frames is not None else {}
    out = []
    for i in launched.early_batches:
        for j, chunk in enumerate(plan.chunks[i].chunks):
            entry = entries.get(chunk.stream_id)
            if entry is None:
                continue
            s = entry.state
            end = chunk.first_frame + chunk.num_frames  # frames [first, end) of this chunk
            if s.first_audio_at is not None or s.frames_decoded or chunk.first_frame != s.audible_skip:
                continue
            if end >= s.frame_limit or (s.eos_frame is not None and s.eos_frame < end):
                continue
            row = rows.get(chunk.stream_id)
            if row is not None and eos_id is not None and launched.c0 is not None and int(launched.c0[row]) == eos_id:
                continue
            out.append((entry, AudioReady(s.id, i, j, 0, chunk.num_frames, False)))
    return out
