"""How much of a graph's timed replay is the device waiting for the host to launch it.

`bench.latency` times a stage as CUDA events around one replay on an idle device (synchronised between
replays), so each figure holds the time from the start event to the graph's first kernel: the host's
`cudaGraphLaunch` (and, for a prompt, its pinned copy) while the device has nothing to do. The engine
meets that wait once a request, at its prefill (the device is idle when an idle server takes a
request); its frame steps are queued behind work in flight, where it is hidden. Each graph here is
timed three ways (ms, medians):

    idle     start event, replay, end event; synchronised between replays (bench.latency's way)
    behind   the same replay queued behind a ~0.3 ms sleep kernel (its own time subtracted): the
             graph's device time from its first kernel to its last, the launch hidden
    chained  `chain` replays back to back between two events, divided by `chain`

    python -m bench.launch_gap --out launch-gap.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from bench.cuda_timing import graph_of

SLEEP_CYCLES = 600_000  # ~0.3 ms at the H200's ~1.98 GHz: longer than any graph launch's host time


def _elapsed(fn, before=None) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    if before is not None:
        before()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def launch_gap(fn, reps: int = 40, chain: int = 20) -> dict:
    """fn: queues one graph's work (a replay, or an engine call that ends in one). -> ms."""
    for _ in range(5):
        fn()
    sleep = lambda: torch.cuda._sleep(SLEEP_CYCLES)  # noqa: E731
    sleep_ms = statistics.median(_elapsed(sleep) for _ in range(reps))
    idle = statistics.median(_elapsed(fn) for _ in range(reps))
    behind = statistics.median(_elapsed(fn, before=sleep) for _ in range(reps)) - sleep_ms

    def chained():
        for _ in range(chain):
            fn()
    chained_ms = statistics.median(_elapsed(chained) for _ in range(max(3, reps // 8))) / chain
    host = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return {"idle_ms": round(idle, 4), "behind_ms": round(behind, 4), "chained_ms": round(chained_ms, 4),
            "launch_wait_ms": round(idle - behind, 4), "host_call_ms": round(statistics.median(host), 4),
            "sleep_ms": round(sleep_ms, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.launch_gap")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--prompt-rows", default="12,22", help="prompt lengths of the prefills timed")
    args = p.parse_args(argv)
    from bench.stages import prompt_ids, stage_fns
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.sampling import SamplingParams

    if not torch.cuda.is_available():
        p.error("bench.launch_gap needs a CUDA device")
    _, model = random_model("1.7b", torch.bfloat16, torch.device("cuda"))
    runner = ModelRunner(model, max_slots=8, max_context=512, buckets=(1, 8))
    runner.capture_graphs()
    runner.k_cache.normal_()
    runner.v_cache.normal_()
    out: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    with torch.inference_mode():
        for t_len in (int(v) for v in args.prompt_rows.split(",")):
            ids = prompt_ids(t_len)
            runner.start_slot(0, SamplingParams(seed=0), 0, eos_allowed=True)
            out[f"prefill_prompt_{t_len}"] = launch_gap(lambda ids=ids: runner.prefill_prompt(0, *ids))
            print(f"prefill_prompt {t_len}: {out[f'prefill_prompt_{t_len}']}", flush=True)
        out["frame_step_async_b1"] = launch_gap(lambda: runner.frame_step_async([0], [5], [22], [0]))
        print(f"frame_step_async b1: {out['frame_step_async_b1']}", flush=True)
        fns = stage_fns(runner, 1, 22)
        for stage in ("talker_step", "code_predictor_frame", "frame_step"):
            out[f"{stage}_b1"] = launch_gap(graph_of(fns[stage]))
            print(f"{stage} b1: {out[f'{stage}_b1']}", flush=True)
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
