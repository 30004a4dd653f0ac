"""Playout feedback timed by the sound card: what the speaker has played, not what was written.

`HardwarePlayoutReporter` is agent/playout.py's PlayoutReporter (same place after the output
transport, same report cadence) with its clock swapped: instead of the seconds written to the
transport, it reports the seconds of the context that the output stream's DAC has reached
(`SoundDeviceOutput.played_s`, from PortAudio's `outputBufferDacTime`). A device with a large
output latency therefore reports less played audio, and the engine's playout deadline
(`played_at + sent - played`) moves later by that latency, as it should: the listener's buffer
holds that much more.
"""

from __future__ import annotations

import time

from agent.playout import PlayoutReporter, PlayoutSink


class HardwarePlayoutReporter(PlayoutReporter):
    def __init__(self, sink: PlayoutSink, output, *, interval_s: float = 0.2, **kwargs):
        """`output`: a SoundDeviceOutput (anything with `played_s(context_id, now)`)."""
        super().__init__(sink, interval_s=interval_s, **kwargs)
        self._output = output

    async def _report(self) -> None:
        self._last_report = time.monotonic()
        played_s = self._output.played_s(self._context_id, self._last_report)
        if played_s is None:  # the transport never saw this context start: nothing is known played
            played_s = 0.0
        await self._sink.report_playout(self._context_id, min(played_s, self._written_s))
