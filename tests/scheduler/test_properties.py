"""Property-based (hypothesis state machine): random sequences of open / append / end / flush /
playout / step / abort / clock against the Scheduler and a fake runner, in both pipeline depths,
with and without the codec tick.
After every operation the invariants hold; at the end, once input has ended everywhere, the
scheduler drains to empty, and every stream got exactly what its script allows: contiguous audio,
then exactly one ending."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.scheduler.fake_runner import FakeLoop, FakeRunner, Rejected
from tts_engine.prompt import Layout
from tts_engine.scheduler.config import SchedulerConfig

NAMES = st.sampled_from([f"s{i}" for i in range(8)])
LIMIT = 12  # max_frames of every stream


class SchedulerMachine(RuleBasedStateMachine):
    @initialize(depth=st.sampled_from([1, 2]), buckets=st.sampled_from([(1,), (1, 2), (1, 2, 4)]),
                codec_tick=st.sampled_from([0, 2, 3]), tick_yields=st.booleans())
    def start(self, depth, buckets, codec_tick, tick_yields):
        self.cfg = SchedulerConfig(max_active_streams=3, max_queued_streams=2, starvation_steps=4,
                                   yield_buffer_s=0.3, codec_tick_steps=codec_tick,
                                   codec_tick_yields_to_prefill=tick_yields)
        self.runner = FakeRunner()
        self.loop = FakeLoop(self.cfg, depth=depth, buckets=buckets, runner=self.runner)
        self.eos_at: dict[str, int | None] = {}

    @rule(sid=NAMES, streaming=st.booleans(), tokens=st.integers(0, 6), eos_at=st.none() | st.integers(0, 14),
          schedule=st.sampled_from([(1,), (1, 2, 4), (3,), (2, 5)]))
    def open(self, sid, streaming, tokens, eos_at, schedule):
        if sid in self.loop.listeners:
            return
        try:
            self.loop.open(sid, tokens=tokens, ended=not streaming, forced=None, max_frames=LIMIT, schedule=schedule,
                           layout=Layout.STREAMING if streaming else Layout.NON_STREAMING)
        except Rejected:
            assert self.loop.sched.admission.admitted == self.cfg.max_active_streams + self.cfg.max_queued_streams
            return
        if eos_at is not None:
            self.runner.eos_at[sid] = eos_at
        self.eos_at[sid] = eos_at

    @rule(sid=NAMES, tokens=st.integers(1, 4))
    def append(self, sid, tokens):
        s = self.loop.sched.streams.get(sid)
        if s is not None and not s.input_ended:
            self.loop.append(sid, tokens)

    @rule(sid=NAMES)
    def end(self, sid):
        self.loop.end(sid)

    @rule(sid=NAMES)
    def flush(self, sid):
        self.loop.flush(sid)

    @rule(sid=NAMES)
    def abort(self, sid):
        self.loop.abort(sid)

    @rule(sid=NAMES, played=st.floats(0.0, 3.0))
    def playout(self, sid, played):
        if sid in self.loop.sched.streams:
            self.loop.report_playout(sid, played)

    @rule(n=st.integers(1, 6))
    def step(self, n):
        for _ in range(n):
            self.loop.step()
            self.loop.assert_invariants()

    @rule(dt=st.floats(0.0, 2.0))
    def clock(self, dt):
        self.loop.now += dt

    @invariant()
    def invariants_hold(self):
        self.loop.assert_invariants()

    def teardown(self):
        loop = self.loop
        for sid, s in list(loop.sched.streams.items()):
            if s.content_ids:
                loop.end(sid)
            else:
                loop.abort(sid)  # the engine ends a stream without text with an error
        loop.run()
        loop.assert_empty()
        for sid, listener in loop.listeners.items():
            assert listener.done is not None, f"{sid} never ended"
            audio = listener.audio
            assert [a.first_frame for a in audio] == [sum(a.num_frames for a in audio[:i]) for i in range(len(audio))]
            if listener.done == "cancelled":
                continue
            eos_at = self.eos_at[sid]
            eos = eos_at is not None and eos_at < LIMIT
            # Frame 0 is dropped; the stream ends at its EOS frame or its limit, whichever is first.
            assert listener.frames == max(0, (eos_at if eos else LIMIT) - 1), (sid, listener, loop.states[sid])
            assert listener.done == ("eos" if eos else "length")
            if audio and not eos:
                assert audio[-1].final and not any(a.final for a in audio[:-1])


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
