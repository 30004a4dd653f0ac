"""The stages the single-GPU benchmarks time, and how they time one with a setting changed.

    prefill_every_slot   a runner's slots started and prefilled, its caches random: what the stages read
    prompt_ids           a CustomVoice-shaped prompt of t_len rows
    stage_fns            the batch-b stages (talker step short and long, code-predictor frame, frame step) as
                         callables, by name
    variant_times        each stage timed through its graph with an object's attributes set meanwhile (restored)
    interleaved_times    the same for several settings in interleaved rounds -> medians
    frame_times          interleaved_times of the code predictor's frame and the frame step at several batches

bench.latency (issue 3's table), bench.latency_experiments, bench.latency_weights, bench.latency_cuda,
bench.profile_step, bench.step_sweep, bench.launch_gap and bench.l2_prefetch time through these.
"""

from __future__ import annotations

import statistics

import torch

from bench.cuda_timing import cuda_time_ms, graph_of


def prefill_every_slot(runner, prompt_rows) -> None:
    """Every slot started (seeded by its index) and prefilled with prompt_rows [T, H]; the caches'
    other cells random, so that no stage is timed on zeros."""
    from tts_engine.sampling import SamplingParams

    runner.k_cache.normal_()
    runner.v_cache.normal_()
    for slot in range(runner.max_slots):
        runner.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
        runner.prefill(slot, prompt_rows)


def prompt_ids(t_len: int) -> tuple[list[int | None], list[int | None]]:
    """A CustomVoice-shaped prompt of t_len >= 10 rows: role tokens, 7 rows with codec ids, the text."""
    text_ids = [151644, 77091, 198] + [151671] * 6 + [151672] + [1000 + i for i in range(t_len - 10)]
    codec_ids = [None] * 3 + [2154, 2156, 2050, 2157, 3061, 2148, 2149] + [None] * (t_len - 10)
    return text_ids, codec_ids


def stage_fns(runner, b: int, t_len: int) -> dict:
    """The stages at batch b (slots 0..b-1 at position t_len) as callables, by name."""
    from tts_engine.runtime.sampler import FAST, GENERAL

    dev = runner.device
    slots = torch.arange(b, device=dev)
    positions = torch.full((b,), t_len, device=dev)
    long_positions = torch.full((b,), runner.max_context - 64, device=dev)  # as `long` below
    x = runner.hidden[:b].clone()
    frames = torch.full((b,), 5, device=dev)
    rows = runner.rows.gather(slots)
    c0 = torch.randint(0, 2048, (b,), device=dev)
    text = torch.zeros(b, dtype=torch.long, device=dev)

    def at(position: int, fn):  # the talker's attention as a frame step at that position picks it
        def run():
            runner.talker_qk_attention = runner.qk_attention_serves(b, position)
            return fn()
        return run

    short, long = t_len, runner.max_context - 64
    return {"talker_step": at(short, lambda: runner._talker_decode(slots, x, positions)),
            "talker_step_long": at(long, lambda: runner._talker_decode(slots, x, long_positions)),
            "code_predictor_frame": lambda: runner.code_predictor.predict(x, c0, frames, rows, variant=FAST),
            "frame_step": at(short, lambda: runner._frame_step(slots, frames, positions, text, FAST)),
            "frame_step_general_sampler": at(short, lambda: runner._frame_step(slots, frames, positions, text,
                                                                                GENERAL))}


def interleaved_times(obj, variants: dict[str, dict], fns: dict, rounds: int) -> dict:
    """`variant_times` of each of variants (name -> obj's settings) in turn, `rounds` times over -> the median
    of each `<stage>_<name>_ms` (an error, `<name>_error`, as first reported)."""
    runs: dict[str, list] = {}
    for _ in range(rounds):
        for name, settings in variants.items():
            for key, value in variant_times(name, obj, settings, fns).items():
                runs.setdefault(key, []).append(value)
    return medians(runs)


def medians(runs: dict[str, list]) -> dict:
    """Interleaved rounds' results by key -> the median of each `*_ms`, the first of anything else (an error)."""
    return {key: statistics.median(v) if key.endswith("_ms") else v[0] for key, v in runs.items()}


def variant_times(name: str, obj, settings: dict, fns: dict) -> dict:
    """Each of fns timed through its graph with obj's attributes `settings` set meanwhile (restored
    after), as `<stage>_<name>_ms`; an experimental path that fails is reported as `<name>_error`,
    not fatal to the run."""
    before = {k: getattr(obj, k) for k in settings}
    for k, v in settings.items():
        setattr(obj, k, v)
    try:
        graphs = {stage: graph_of(fn) for stage, fn in fns.items()}
        return {f"{stage}_{name}_ms": cuda_time_ms(g) for stage, g in graphs.items()}
    except Exception as exc:
        return {f"{name}_error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        for k, v in before.items():
            setattr(obj, k, v)


def frame_times(runner, t_len: int, obj, variants: dict[str, dict], rounds: int, batches, what: str,
                stage_names: tuple[str, ...] = ("code_predictor_frame", "frame_step")) -> dict:
    """`stage_names` (by default the code predictor's frame and the frame step) with each of `variants` (obj's settings)
    at each of `batches` the runner holds, interleaved rounds -> {batch: {key: median ms}}."""
    out = {}
    for b in (b for b in batches if b <= runner.max_slots):
        fns = stage_fns(runner, b, t_len)
        stages = {k: fns[k] for k in stage_names}
        out[b] = interleaved_times(obj, variants, stages, rounds)
        print(f"batch {b}, {what}: {out[b]}", flush=True)
    return out
