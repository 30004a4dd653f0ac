"""What the CPU tests of the fast path share (tests/runtime/test_fast_path.py and the interpreted checks of one kernel
path against another: test_cp_*.py, test_split_k.py): requests with a forced length, a driver
that runs a ModelRunner the way the engine does, two streams compared code for code, and the subprocess those checks
run in.

Triton reads TRITON_INTERPRET when `@triton.jit` decorates a kernel, i.e. when its module is first imported. A test
process has already imported the kernels (through the runner), so the interpreted checks run in a fresh subprocess
with the variable set (`run_interpreted`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tts_engine import sampling as ref
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.reference import GenerationInput
from tts_engine.runtime.options import FastPathOptions
from tts_engine.runtime.runner import ModelRunner
from tts_engine.synthesizer import Synthesizer

REPO = Path(__file__).resolve().parents[2]
FRAMES = 6

GREEDY = ref.SamplingParams.greedy()
SAMPLED = ref.SamplingParams(seed=11)
SAMPLED_TOP_P = ref.SamplingParams(seed=12, top_p=0.7, subtalker_top_p=0.8, temperature=1.2)
SAMPLED_NO_TOP_K = ref.SamplingParams(seed=13, top_k=0, subtalker_top_k=0, repetition_penalty=1.3)


def make_input(synth: Synthesizer, text: str, layout: Layout, params: ref.SamplingParams,
               voice: str = "ryan", frames: int = FRAMES) -> GenerationInput:
    """A request with a forced length of `frames` (EOS masked, as on random-weight checkpoints)."""
    inp = synth.prepare(text, VoiceSpec(voice), layout=layout, params=params)
    return replace(inp, max_frames=frames + 10, forced_frames=frames)


class Driver:
    """Drives a ModelRunner the way the engine does: one slot per request; frame k of a request is
    produced at talker position len(prompt) + k with the prompt's step text; EOS is masked as the
    engine does for random-weight checkpoints."""

    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.requests: dict[int, tuple[GenerationInput, list[torch.Tensor]]] = {}

    def start(self, slot: int, inp: GenerationInput) -> list[torch.Tensor]:
        """Prefill `inp` into `slot`; -> the list its frames [16] are appended to."""
        r = self.runner
        r.start_slot(slot, inp.params, inp.seed, eos_allowed=False)
        r.prefill(slot, r.embed_prompt(list(inp.prompt.text_ids), list(inp.prompt.codec_ids)))
        self.requests[slot] = (inp, [])
        return self.requests[slot][1]

    def step(self, slots: list[int]) -> None:
        frames = [len(self.requests[s][1]) for s in slots]
        prompts = [self.requests[s][0].prompt for s in slots]
        codes = self.runner.frame_step(slots, frames, [len(p) + f for p, f in zip(prompts, frames)],
                                       [p.step_text_id(f) for p, f in zip(prompts, frames)])
        for slot, row in zip(slots, codes.cpu()):
            self.requests[slot][1].append(row)

    def codes(self, slot: int) -> torch.Tensor:
        return torch.stack(self.requests[slot][1])


def new_runner(synth: Synthesizer, **kw) -> ModelRunner:
    return ModelRunner(synth.model, max_slots=8, max_context=128, use_triton=False, use_graphs=False, **kw)


def assert_codes_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not torch.equal(got, want):
        bad = (got != want).any(1).nonzero().flatten().tolist()
        raise AssertionError(f"{what}: codes differ at frames {bad}\ngot  {got[bad[0]].tolist()}\n"
                             f"want {want[bad[0]].tolist()}")


# The interpreted checks of one kernel path against another: two streams of two frames on a small runner without
# graphs, their codes compared.
STREAM_SLOTS = (2, 0)


def two_streams(synth: Synthesizer) -> list[GenerationInput]:
    """A sampled streaming request (for slot 2) and a greedy non-streaming one (slot 0), two frames each."""
    return [make_input(synth, "Hi there.", Layout.STREAMING, SAMPLED, frames=2),
            make_input(synth, "Greedy one", Layout.NON_STREAMING, GREEDY, voice="vivian", frames=2)]


def small_driver(synth: Synthesizer, options: FastPathOptions, use_triton: bool = True) -> Driver:
    return Driver(ModelRunner(synth.model, max_slots=4, max_context=32, use_triton=use_triton, use_graphs=False,
                              options=options))


def start_streams(d: Driver, inputs: list[GenerationInput]) -> None:
    for slot, inp in zip(STREAM_SLOTS, inputs, strict=True):
        d.start(slot, inp)


def stream_codes(d: Driver) -> tuple[torch.Tensor, ...]:
    return tuple(d.codes(slot) for slot in STREAM_SLOTS)


def assert_streams_equal(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...], what: str) -> None:
    for slot, g, w in zip(STREAM_SLOTS, got, want, strict=True):
        assert_codes_equal(g, w, f"slot {slot} {what}")


def run_interpreted(call: str, module: str, timeout: float = 240) -> None:
    """`module`.`call` in a fresh Python with TRITON_INTERPRET=1; it must exit 0 and print OK."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"triton is not importable ({exc}); the Triton kernel tests need it on CPU too, "
                    "through its interpreter: pip install 'triton>=3.1' (see the test extra)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    code = f"import {module} as t; t.{call}"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"interpreted check failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    assert "OK" in proc.stdout, proc.stdout


def assert_interpreted() -> None:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from tts_engine.kernels import decode_attention as da

    kernels = [v for v in vars(da).values() if isinstance(v, JITFunction | InterpretedFunction)]
    assert kernels, "tts_engine.kernels.decode_attention defines no Triton kernel (is triton importable?)"
    assert all(isinstance(k, InterpretedFunction) for k in kernels), \
        "the kernels are compiled, not interpreted: TRITON_INTERPRET=1 was not set when they were defined"
