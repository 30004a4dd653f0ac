"""The words of a streamed (TOKEN-mode) reply pushed in the order they were played: a mixin for pipecat 1.14's
TTSService, ahead of it in a service's bases (agent/cadence_tts.py).

In TOKEN mode pipecat's AggregatedFrameSequencer holds the words timed before their sentence is complete, and when the
sentence is (its end, or the turn's), hands them back to be queued at the end of the audio context. Word timestamps
queued there meanwhile are ahead of them: the audio-context task matches those against the new sentence and pushes
them first, so an interrupted reply's context read "to Here is a long answer ..." (stops 14 and 35, CI). Here the
handed-back frames wait beside the queue and go out before its next item, in the order the sequencer matched them; a
marker in the queue makes that item come, the end of the context pushes them too, an interruption drops them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipecat.frames.frames import ControlFrame, Frame


@dataclass
class _SequencedFramesDue(ControlFrame):
    """Queued in audio context `context_id`: frames the sequencer handed back for it wait to be pushed. Never pushed
    downstream itself."""

    context_id: str = ""


class WordsInPlaybackOrder:
    """Overrides of TTSService's audio-context playback (pipecat 1.14, pinned) that keep the sequencer's frames in
    playback order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Frames the sequencer handed back for an audio context (a promoted sentence, the words it replays), pushed by
        # the audio-context task before its next item.
        self._sequenced: dict[str, list[Frame]] = {}

    async def _push_sequencer_frames(self, frames: list[Frame], context_id: str | None):
        if not (self._is_streaming_tokens and context_id and self.audio_context_available(context_id)):
            await super()._push_sequencer_frames(frames, context_id)
            return
        if frames:
            self._sequenced.setdefault(context_id, []).extend(frames)
            await self.append_to_audio_context(context_id, _SequencedFramesDue(context_id=context_id))

    async def _push_audio_context_item(self, context_id: str, item, playback) -> None:
        await self._push_sequenced(context_id)
        if not isinstance(item, _SequencedFramesDue):
            await super()._push_audio_context_item(context_id, item, playback)

    async def _end_audio_context(self, context_id: str, playback) -> None:
        await self._push_sequenced(context_id)
        await super()._end_audio_context(context_id, playback)

    def drop_sequenced(self, context_id: str) -> None:
        """An interrupted context's frames, dropped with its queue (first thing in `on_audio_context_interrupted`:
        the audio-context task must not push them while the interruption is handled)."""
        self._sequenced.pop(context_id, None)

    async def _push_sequenced(self, context_id: str) -> None:
        for frame in self._sequenced.pop(context_id, ()):
            await self.push_frame(frame)
