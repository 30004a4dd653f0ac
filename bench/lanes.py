"""Two lanes on one GPU: a newcomer's path to first audio on a CUDA stream of its own, beside other
streams' steps on the default stream. Is it worth a newcomer lane (docs/perf-notes.md)?

Under load a new stream's first audio waits behind the steps in flight (run 11: idle 11-13 ms, p50
20 ms at 10 req/s). A second lane would run the newcomer's prefill, its two frames and its first codec
chunk at batch 1 beside them. What that buys depends on how the two share the GPU (SMs and memory
bandwidth, stream priority), which only the GPU can say:

  newcomer   prefill (a 24-row prompt) + frame 0 + frame 1 + the one-frame first chunk, batch 1,
             on its own runners (graphs, memory pool, code-predictor buffers, codec state)
  background frame steps at batch 8 with a codec tick (8 streams x 2 frames) every other step,
             back to back on the default stream, as a loaded server runs them

Times (CUDA events, ms), for the newcomer's whole path and for its prefill alone (the smaller step:
only the prefill on a stream of its own): the work alone; the background's step alone; and both at
once, the work on a high-priority stream and on a normal one (its time from its first kernel to its
end, and the background's step time meanwhile). The engine's single lane, for comparison: the work
queued behind the steps in flight (its time from its launch, waits included).

    python -m bench.lanes --model /tmp/ckpt --out lanes.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch

BACKGROUND_BATCH = 8
TICK_FRAMES = 2


def _pct(values: list[float]) -> dict:
    s = sorted(values)
    return {"p50": round(statistics.median(s), 3), "p95": round(s[min(len(s) - 1, int(0.95 * len(s)))], 3),
            "mean": round(statistics.fmean(s), 3), "n": len(s)}


class Lanes:
    def __init__(self, model_dir: Path):
        from tts_engine.loading import load_checkpoint
        from tts_engine.runtime.codec_runner import CodecRunner
        from tts_engine.runtime.runner import ModelRunner
        from tts_engine.sampling import SamplingParams

        ckpt = load_checkpoint(model_dir, device="cuda", dtype=torch.bfloat16)
        codec = ckpt.codec.to(torch.bfloat16).use_fused_kernels()
        b = BACKGROUND_BATCH
        self.main = ModelRunner(ckpt.model, max_slots=b, max_context=1024, buckets=(b,))
        self.main_codec = CodecRunner(codec, b, chunk_sizes=(TICK_FRAMES,), buckets=(b,))
        self.lane = ModelRunner(ckpt.model, max_slots=1, max_context=1024, buckets=(1,))
        self.lane_codec = CodecRunner(codec, 1, chunk_sizes=(1,), buckets=(1,))
        # The lane's graphs on capture streams of their own: graphs captured on one stream share its
        # cuBLAS workspace, and the two lanes' replay at the same time.
        self.main.capture_graphs()
        self.lane.capture_graphs(capture_stream=torch.cuda.Stream())
        self.lane_codec.capture_stream = torch.cuda.Stream()
        for r in (self.main, self.lane):
            r.k_cache.normal_()
            r.v_cache.normal_()
        for c in (self.main_codec, self.lane_codec):
            c.capture()
        self.prompt = ([151644, 77091, 198] + [151671] * 6 + [151672] + list(range(1000, 1014)),
                       [None] * 3 + [2154, 2156, 2050, 2157, 3061, 2148, 2149] + [None] * 14)  # text, codec ids
        for slot in range(b):
            self.main.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=False)
            self.main.prefill_prompt(slot, *self.prompt)
        self.lane.start_slot(0, SamplingParams(seed=99), 99, eos_allowed=False)
        self.max_code = codec.cfg.codebook_size - 1
        self.position = 200  # the background streams' talker position (reset every 500 steps)
        self.steps = 0
        torch.cuda.synchronize()

    def newcomer(self) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        """Queue the newcomer's path on the current stream -> (start, first PCM) events."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t = len(self.prompt[0])
        self.lane.prefill_prompt(0, *self.prompt)
        self.lane_codec.reset(0)
        self.lane.frame_step_async([0], [0], [t], [151671])

        def first_chunk(codes: torch.Tensor) -> None:
            self.lane_codec.launch([0], codes[:, :, None].clamp(max=self.max_code))
            end.record()

        self.lane.frame_step_async([0], [1], [t + 1], [151671], after_codes=first_chunk)
        return start, end

    def prefill(self) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        """The newcomer's prefill alone on the current stream -> (start, end) events."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.lane.prefill_prompt(0, *self.prompt)
        end.record()
        return start, end

    def background_step(self) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        """One loaded-server step on the current stream -> (start, end) events."""
        b = BACKGROUND_BATCH
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.steps += 1
        tick = self.steps % 2 == 0

        def chunks(codes: torch.Tensor) -> None:
            if tick:
                tick_codes = codes[:, :, None].clamp(max=self.max_code).expand(-1, -1, TICK_FRAMES)
                self.main_codec.launch(list(range(b)), tick_codes)

        self.position = 200 + self.steps % 500
        self.main.frame_step_async(list(range(b)), [self.steps] * b, [self.position] * b, [151671] * b,
                                   after_codes=chunks)
        end.record()
        return start, end


def _elapsed(pairs) -> list[float]:
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


@torch.inference_mode()
def measure(lanes: Lanes, reps: int, background_steps: int) -> dict:
    out = {}
    for _ in range(5):
        lanes.newcomer()
        lanes.background_step()
    out["background_step_alone_ms"] = _pct(_elapsed([lanes.background_step() for _ in range(background_steps)]))
    every = max(1, background_steps // reps)
    for work_name, work in (("newcomer", lanes.newcomer), ("prefill", lanes.prefill)):
        out[f"{work_name}_alone_ms"] = _pct(_elapsed([work() for _ in range(reps)]))
        for name, priority in (("high", -1), ("normal", 0)):
            side = torch.cuda.Stream(priority=priority)
            works, steps = [], []
            for i in range(background_steps):
                steps.append(lanes.background_step())
                if i % every == every // 2 and len(works) < reps:
                    with torch.cuda.stream(side):
                        works.append(work())
            torch.cuda.current_stream().wait_stream(side)
            out[f"{work_name}_beside_{name}_ms"] = _pct(_elapsed(works))
            out[f"background_step_beside_{work_name}_{name}_ms"] = _pct(_elapsed(steps))
        # One lane: the work queued behind the steps in flight, timed from when the host queued it
        # (an event on a stream that waits for nothing) to its end.
        marker = torch.cuda.Stream()
        queued = []
        for i in range(background_steps):
            lanes.background_step()
            if i % every == every // 2 and len(queued) < reps:
                at = torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(marker):
                    at.record()
                _, end = work()
                queued.append((at, end))
        out[f"{work_name}_queued_ms"] = _pct(_elapsed(queued))
        print(f"lanes {work_name}: {out}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.lanes")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--background-steps", type=int, default=400)
    args = p.parse_args(argv)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("CADENCE_COMMIT", "unknown"), "background_batch": BACKGROUND_BATCH,
              "tick_frames": TICK_FRAMES}
    result |= measure(Lanes(args.model), args.reps, args.background_steps)
    print(json.dumps(result, indent=2), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
