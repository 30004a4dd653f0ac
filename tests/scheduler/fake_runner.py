"""A fake runner and a fake engine loop for scheduler tests: pure Python, no model, no torch.

`FakeRunner` executes `StepPlan`s the way the engine's StepExecutor does, minus the tensors: a frame
row's codebook 0 is EOS exactly at the frame its stream's script says, every part takes the time a
fixed table says, and a step's result is there when the pipeline reads it.
It also checks what a real runner relies on: distinct slots per call, prefill before frames, frames
chunked only once launched and in order, and no work for a slot after its stream was removed
(unless launched before).

`FakeLoop` wires a Scheduler, the engine's StepPipeline and a FakeRunner the way
`StreamingEngine._step` does, with a fake clock and a listener per stream, and records every event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tts_engine.engine.pipeline import StepPipeline
from tts_engine.prompt import Layout
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.scheduler.plan import AudioReady, Finished, FlushDone, Output, StepPlan, StepResult, StepTimings
from tts_engine.scheduler.request import FRAME_S, Phase, StreamState
from tts_engine.scheduler.scheduler import Scheduler

EOS, PAD = 151673, 151671
BUCKETS = (1, 2, 4, 8, 16, 32, 64)
PROMPT_LEN = 20


@dataclass
class FakeCosts:
    """Seconds each part of a step takes on the fake device."""

    frame_s: float = 0.004
    prefill_s: float = 0.002
    chunk_s: float = 0.002


@dataclass
class FakeLaunched:
    plan: StepPlan
    result: StepResult
    waited: bool = False

    def wait(self) -> None:
        self.waited = True


@dataclass
class FakeRunner:
    eos_at: dict[str, int] = field(default_factory=dict)  # stream id -> frame whose codebook 0 is EOS
    costs: FakeCosts = field(default_factory=FakeCosts)
    launched: dict[str, int] = field(default_factory=dict)  # stream id -> frames launched
    chunked: dict[str, int] = field(default_factory=dict)  # stream id -> next absolute frame to chunk
    slot_owner: dict[int, str] = field(default_factory=dict)
    plans: list[StepPlan] = field(default_factory=list)
    padded: list = field(default_factory=list)  # chunks run padded in a longer codec call

    def launch(self, plan: StepPlan) -> FakeLaunched:
        self.plans.append(plan)
        for p in plan.prefills:
            self.slot_owner[p.slot] = p.stream_id
            self.launched[p.stream_id] = 0
        eos: tuple[bool, ...] = ()
        if plan.frames is not None:
            rows = plan.frames.rows
            assert len({r.slot for r in rows}) == len(rows), "a slot twice in one frame step"
            assert len(rows) <= plan.frames.bucket
            for r in rows:
                assert self.slot_owner.get(r.slot) == r.stream_id, f"{r.stream_id}: slot {r.slot} not prefilled"
                assert r.frame == self.launched[r.stream_id], f"{r.stream_id}: frame {r.frame} out of order"
                assert r.position == PROMPT_LEN + r.frame and r.text_id is not None
                self.launched[r.stream_id] += 1
            eos = tuple(self.eos_at.get(r.stream_id) == r.frame for r in rows)
        for batch in plan.chunks:
            assert len({c.slot for c in batch.chunks}) == len(batch.chunks), "a slot twice in one codec call"
            for c in batch.chunks:
                assert 1 <= c.num_frames <= batch.num_frames
                if c.num_frames < batch.num_frames:  # padded: only a stream's final chunk
                    self.padded.append(c)
                assert self.slot_owner.get(c.slot) == c.stream_id
                start = self.chunked.setdefault(c.stream_id, c.first_frame)
                assert c.first_frame == start, f"{c.stream_id}: chunk at {c.first_frame}, expected {start}"
                assert c.first_frame + c.num_frames <= self.launched[c.stream_id], "chunk of frames not launched"
                self.chunked[c.stream_id] += c.num_frames
        timings = StepTimings(tuple(self.costs.prefill_s for _ in plan.prefills),
                              self.costs.frame_s if plan.frames is not None else None,
                              tuple(self.costs.chunk_s for _ in plan.chunks))
        return FakeLaunched(plan, StepResult(plan.step_id, eos, timings))


@dataclass
class Listener:
    """What one stream's client received."""

    audio: list[AudioReady] = field(default_factory=list)
    flushes: int = 0
    done: str | None = None

    @property
    def frames(self) -> int:
        return sum(a.num_frames for a in self.audio)


class Rejected(Exception):
    def __init__(self, reason: str, retry_after_s: float):
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class FakeLoop:
    def __init__(self, config: SchedulerConfig | None = None, *, depth: int = 2, buckets=BUCKETS,
                 runner: FakeRunner | None = None, reject_predicted_underrun: bool = False, dt: float = 0.01):
        self.sched = Scheduler(config or SchedulerConfig(), buckets, EOS, PAD,
                               reject_predicted_underrun=reject_predicted_underrun)
        self.runner = runner or FakeRunner()
        self.pipeline = StepPipeline(depth)
        self.now = 1000.0
        self.sched.admission.clock = lambda: self.now  # finishes (release) on the fake clock too
        self.dt = dt
        self.listeners: dict[str, Listener] = {}
        self.states: dict[str, StreamState] = {}
        self.removed: set[str] = set()

    # -- streams -----------------------------------------------------------------------------------
    def open(self, sid: str, *, tokens: int = 5, ended: bool = True, layout: Layout = Layout.NON_STREAMING,
             forced: int | None = 12, max_frames: int = 100, schedule: tuple[int, ...] = (1, 2, 4),
             drop_first: bool = True) -> StreamState:
        adm = self.sched.admission
        with adm.lock:
            decision = adm.try_admit(self.now)
        if not decision.admitted:
            raise Rejected(decision.reason, decision.retry_after_s)
        s = StreamState(sid, layout, seed=1, max_frames=max_frames, forced_frames=forced, chunk_schedule=schedule,
                        drop_first_frame=drop_first, arrival=self.now)
        self.sched.add(s)
        self.listeners[sid] = Listener()
        self.states[sid] = s
        s.input_ended = ended
        self.append(sid, tokens)
        return s

    def append(self, sid: str, tokens: int) -> None:
        s = self.sched.streams.get(sid)
        if s is None:
            return
        s.content_ids.extend(range(len(s.content_ids), len(s.content_ids) + tokens))
        if s.phase is Phase.WAITING_TEXT and s.ready_for_prefill():
            self.sched.enqueue(sid, PROMPT_LEN)

    def end(self, sid: str) -> None:
        s = self.sched.streams.get(sid)
        if s is not None:
            s.input_ended = True
            self.append(sid, 0)

    def flush(self, sid: str) -> None:
        if sid in self.sched.streams:
            self.sched.flush(sid)

    def abort(self, sid: str) -> bool:
        gone = self.sched.abort(sid) is not None
        if gone:
            self.listeners[sid].done = "cancelled"
            self.removed.add(sid)
        return gone

    def report_playout(self, sid: str, played_s: float) -> None:
        self.sched.playout(sid, played_s, self.now)

    # -- steps ---------------------------------------------------------------------------------------
    def step(self) -> StepPlan:
        """One engine iteration, as StreamingEngine._step does it."""
        self._act(self.sched.reap())
        plan = self.sched.schedule(self.now)
        if not plan.empty:
            self.pipeline.push(self.runner.launch(plan))
        depth = None if self.sched.wants_lookahead(self.now) else 1
        for launched in self.pipeline.completed(must_wait=plan.empty, depth=depth):
            self._act(self.sched.postprocess(launched.result))
        self.now += self.dt
        return plan

    def _act(self, outputs: list[Output]) -> None:
        for out in outputs:
            listener = self.listeners[out.stream_id]
            assert listener.done is None, f"{out} after the stream ended"
            if isinstance(out, AudioReady):
                assert out.first_frame == listener.frames, "audio out of order"
                listener.audio.append(out)
                self.sched.audio_sent(self.states[out.stream_id], out.num_frames * FRAME_S, self.now)
            elif isinstance(out, FlushDone):
                listener.flushes += 1
            elif isinstance(out, Finished):
                listener.done = out.reason
                self.removed.add(out.stream_id)

    def run(self, max_steps: int = 10_000, check: bool = True) -> int:
        """Step until nothing is live or in flight; returns the steps taken."""
        for n in range(max_steps):
            if not self.sched.has_work() and not len(self.pipeline):
                return n
            self.step()
            if check:
                self.assert_invariants()
        raise AssertionError(f"not done after {max_steps} steps: {self.sched.metrics()}")

    def violations(self) -> list[str]:
        idle = len(self.pipeline) == 0
        out = self.sched.violations(idle=idle)
        if self.sched.admission.admitted != len(self.sched.streams):
            out.append(f"admitted {self.sched.admission.admitted} != live {len(self.sched.streams)}")
        return out

    def assert_invariants(self) -> None:
        assert not self.violations(), self.violations()

    def assert_empty(self) -> None:
        assert not self.sched.streams and not self.sched.in_flight and not len(self.pipeline)
        assert self.sched.slots.num_free == self.sched.slots.num_slots
        assert self.sched.admission.admitted == 0
        self.assert_invariants()
