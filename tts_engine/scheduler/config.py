"""Scheduler settings: one frozen dataclass, validated once. No torch."""

from __future__ import annotations

from dataclasses import dataclass

CODEC_TICK_CUDA = 2
FIRST_AUDIO_SLO_CUDA_S = 0.1


@dataclass(frozen=True)
class SchedulerConfig:
    # Slots (streams decoding at once) and streams admitted beyond them, waiting for a slot.
    max_active_streams: int = 64
    max_queued_streams: int = 64
    # Prefills per engine step: at least one while slots are free, more while the most urgent
    # audible stream's buffer covers their cost.
    max_prefills_per_step: int = 4
    # A stream this far ahead of its listener yields its frame and chunk work when capacity is short.
    yield_buffer_s: float = 1.5
    # Codec tick (0: off): after its first chunk, a stream's chunks are due only every this many
    # engine steps, with all its ready frames (policy.due_chunks), so that streams share codec
    # calls; off, each stream follows its own chunk schedule and a step holds one small codec call
    # per schedule phase (~2 streams a call at 30 req/s on the H200, 2/3 of the device time).
    # None: CODEC_TICK_CUDA on CUDA, off on CPU (a simulation of the step loop chose 2).
    codec_tick_steps: int | None = None
    # With the tick: a stream's first this many chunks follow its chunk schedule, each as soon as its frames
    # are launched; the tick holds the later ones. The second chunk must reach the listener before the first
    # one's 80 ms have played; held for a tick it comes an engine step later, and with many streams a step is
    # long enough for that to run the listener dry (docs/performance.md).
    codec_tick_free_chunks: int = 2
    # With the tick: a stream whose listener has less audio than this left gets its chunk now.
    codec_tick_urgent_s: float = 0.04
    # With the tick: a tick step that would hold a prefill moves to the next step (Scheduler._on_tick).
    # The new stream's first audio comes sooner at every load (docs/performance.md).
    codec_tick_yields_to_prefill: bool = True
    # A stream passed over this many steps in a row runs next, whatever its deadline.
    starvation_steps: int = 8
    # Real time holds when one engine cycle (a frame for every stream, its share of codec and
    # prefill work) takes at most FRAME_S / realtime_margin.
    realtime_margin: float = 1.25
    # Refuse a stream whose admission would make the predicted cycle miss real time. None: on when
    # the engine runs on CUDA (a CPU engine is for tests and development and is never real time).
    reject_predicted_underrun: bool | None = None
    # Refuse a stream at once (503 + Retry-After) when every slot is taken and its predicted wait
    # for one puts its first audio past this many seconds (admission.py); the queue then stays
    # as short as the SLO allows. None: 0.1 on CUDA, off on CPU (a CPU engine is never real
    # time); 0: off, a stream queues while max_queued_streams allows.
    first_audio_slo_s: float | None = None
    cost_ema_alpha: float = 0.2
    # Lookahead (a second step launched before the first is read, at pipeline depth 2) only while a
    # stream needs audio soon: one not yet audible, one with less than this much audio ahead of its
    # listener, or capacity short. Otherwise steps run one at a time, so a stream that arrives waits
    # behind at most the step on the device, not a second one queued after it (always looking ahead,
    # one busy stream adds ~8 ms to first audio at 1-10 req/s).
    lookahead_buffer_s: float = 0.3
    # Engine steps in flight: 2 on CUDA (step k+1 is launched before step k's codes are read),
    # 1 on CPU (synchronous). None: by device.
    pipeline_depth: int | None = None
    # The watchdog reports a stall when the loop makes no progress this long while work is pending.
    watchdog_stall_s: float = 10.0
    # Idle-time invariant violations fault the engine (tests) instead of being logged and counted.
    raise_on_invariant_violation: bool = False

    def validate(self) -> SchedulerConfig:
        if self.max_active_streams < 1:
            raise ValueError(f"max_active_streams must be >= 1, got {self.max_active_streams}")
        if self.codec_tick_free_chunks < 1:
            raise ValueError(f"codec_tick_free_chunks must be >= 1, got {self.codec_tick_free_chunks}")
        for name in ("max_queued_streams", "starvation_steps", "codec_tick_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_prefills_per_step < 1:
            raise ValueError(f"max_prefills_per_step must be >= 1, got {self.max_prefills_per_step}")
        if not self.codec_tick_urgent_s >= 0:
            raise ValueError(f"codec_tick_urgent_s must be >= 0, got {self.codec_tick_urgent_s}")
        if not isinstance(self.lookahead_buffer_s, int | float) or not self.lookahead_buffer_s >= 0:
            raise ValueError(f"lookahead_buffer_s must be a number >= 0, got {self.lookahead_buffer_s}")
        if not self.yield_buffer_s > 0:
            raise ValueError(f"yield_buffer_s must be > 0, got {self.yield_buffer_s}")
        if not self.realtime_margin >= 1.0:
            raise ValueError(f"realtime_margin must be >= 1, got {self.realtime_margin}")
        if self.first_audio_slo_s is not None and not self.first_audio_slo_s >= 0:
            raise ValueError(f"first_audio_slo_s must be >= 0, got {self.first_audio_slo_s}")
        if not 0.0 < self.cost_ema_alpha <= 1.0:
            raise ValueError(f"cost_ema_alpha must be in (0, 1], got {self.cost_ema_alpha}")
        if self.pipeline_depth is not None and self.pipeline_depth not in (1, 2):
            raise ValueError(f"pipeline_depth must be 1 or 2, got {self.pipeline_depth}")
        if not self.watchdog_stall_s > 0:
            raise ValueError(f"watchdog_stall_s must be > 0, got {self.watchdog_stall_s}")
        return self
