"""The GPU stages of issue 3's table, each timed as CUDA-event medians of captured-graph replays
(bench/cuda_timing.py), on the runner and codec as the server builds them (FastPathOptions' defaults).

    stage_times(runner, batches)      talker step (short and long context), code-predictor frame, frame step
    prefill_times(runner)             one prompt's prefill graph at 12 / 40 / 120 rows
    codec_times(codec, batches)       the served codec's 1- / 2- / 12-frame chunks, its SNR
    floors(model)                     the copy bandwidth and the batch-1 weight-read floors it implies
    reference_ms_per_frame(model)     the plain reference loop (eager torch, no graphs)
"""

from __future__ import annotations

import copy
import time
from functools import partial

import torch

from bench.cuda_timing import cuda_time_ms, graph_of

PROMPT_ROWS = 11  # a CustomVoice prompt of a one-token text: the short context of the talker step


def prompt_ids(t_len: int) -> tuple[list[int | None], list[int | None]]:
    """A CustomVoice-shaped prompt of t_len >= 10 rows: role tokens, 7 rows with codec ids, the text."""
    text_ids = [151644, 77091, 198] + [151671] * 6 + [151672] + [1000 + i for i in range(t_len - 10)]
    codec_ids = [None] * 3 + [2154, 2156, 2050, 2157, 3061, 2148, 2149] + [None] * (t_len - 10)
    return text_ids, codec_ids


def prefill_every_slot(runner, t_len: int = PROMPT_ROWS) -> None:
    """Every slot started (seeded by its index) and prefilled with one prompt; the caches' other cells
    random, so that no stage is timed on zeros."""
    from tts_engine.sampling import SamplingParams

    rows = runner.embed_prompt(*prompt_ids(t_len))
    runner.k_cache.normal_()
    runner.v_cache.normal_()
    for slot in range(runner.max_slots):
        runner.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
        runner.prefill(slot, rows)


def stage_fns(runner, b: int, t_len: int = PROMPT_ROWS) -> dict:
    """The stages at batch b (slots 0..b-1 at position t_len; the long talker step at max_context - 64) as
    callables, by name. The code predictor and the frame step draw with the sampler the defaults get."""
    from tts_engine.runtime.sampler import FAST

    dev = runner.device
    slots = torch.arange(b, device=dev)
    short, long = t_len, runner.max_context - 64
    positions, long_positions = (torch.full((b,), p, device=dev) for p in (short, long))
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

    return {"talker_step": at(short, lambda: runner._talker_decode(slots, x, positions)),
            "talker_step_long": at(long, lambda: runner._talker_decode(slots, x, long_positions)),
            "code_predictor_frame": lambda: runner.code_predictor.predict(x, c0, frames, rows, variant=FAST),
            "frame_step": at(short, lambda: runner._frame_step(slots, frames, positions, text, FAST))}


def stage_times(runner, batches) -> dict[int, dict[str, float]]:
    """{batch: {"<stage>_ms": median ms}} for the batches the runner holds."""
    prefill_every_slot(runner)
    out = {}
    with torch.inference_mode():
        for b in (b for b in batches if b <= runner.max_slots):
            graphs = {stage: graph_of(fn) for stage, fn in stage_fns(runner, b).items()}
            out[b] = {f"{stage}_ms": cuda_time_ms(g) for stage, g in graphs.items()}
            print(f"batch {b}: {out[b]}", flush=True)
    return out


def prefill_times(runner, lengths=(12, 40, 120)) -> dict[str, float]:
    """One prompt's embedding and prefill at batch 1 (slot 0) through its captured bucket graph."""
    out = {}
    with torch.inference_mode():
        runner.capture_prefill_graphs()
        for t_len in lengths:
            out[f"prefill_{t_len}_ms"] = cuda_time_ms(partial(runner.prefill_prompt, 0, *prompt_ids(t_len)))
    print(f"prefill: {out}", flush=True)
    return out


def incremental_chunk(codec, b: int, t: int):
    """A callable that decodes b streams x t frames continuing 30 frames of state (restored before every
    call, so each replay does the same work); call under inference mode."""
    codes = torch.randint(0, 2048, (b, 16, t), device="cuda")
    state = codec.new_state(b)
    codec.decode_chunk(torch.randint(0, 2048, (b, 16, 30), device="cuda"), state)
    keep = [x.clone() for x in state.tensors()]

    def run():
        for dst, src in zip(state.tensors(), keep):
            dst.copy_(src)
        codec.decode_chunk(codes, state)

    return run


def pcm_snr_db(codec, probe: torch.Tensor, exact: torch.Tensor) -> float:
    """The SNR (dB) of `codec`'s PCM for codes `probe` [B, Q, t] from fresh states against `exact` [B, t * spf] (fp32;
    inf where equal)."""
    err = (codec.decode_chunk(probe, codec.new_state(probe.shape[0]))[0].float() - exact).pow(2).mean()
    return float("inf") if err == 0 else float(10 * torch.log10(exact.pow(2).mean() / err))


def codec_times(codec, batches) -> dict:
    """The codec as the server runs it (runtime/codec_runner.py `served_codec`: bf16, its fast path) ->
    {batch: {"chunk_1f_ms", "chunk_2f_ms", "chunk_12f_ms"}} (1 frame: a stream's first chunk) and its PCM SNR
    (dB) against exact all-torch fp32 on one 24-frame decode."""
    from tts_engine.runtime.codec_runner import cuda_numerics, served_codec

    served, _ = served_codec(copy.deepcopy(codec), True, None)
    out: dict = {}
    with torch.inference_mode(), cuda_numerics(False):
        probe = torch.randint(0, 2048, (1, 16, 24), generator=torch.Generator().manual_seed(0)).cuda()
        out["snr_db_vs_fp32"] = pcm_snr_db(served, probe, codec.decode_chunk(probe, codec.new_state(1))[0].float())
        for b in batches:
            out[b] = {f"chunk_{t}f_ms": cuda_time_ms(graph_of(incremental_chunk(served, b, t))) for t in (1, 2, 12)}
            print(f"codec batch {b}: {out[b]}", flush=True)
    return out


def floors(model, gib: int = 4) -> dict[str, float]:
    """A `gib` GiB device-to-device copy's bandwidth, and the batch-1 floors it puts on reading the weights
    (bf16) of a talker step and of a code-predictor frame (15 passes through its layers, each head once)."""
    n = gib * (1 << 30) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    ms = cuda_time_ms(lambda: b.copy_(a), warmup=3, reps=10)
    bw = 2 * a.numel() * 2 / (ms * 1e-3)
    state = model.state_dict()

    def size(keep) -> int:
        return sum(t.numel() * 2 for name, t in state.items() if keep(name))

    talker = size(lambda n: n.startswith("talker.model.layers") or n in ("talker.codec_head.weight",
                                                                        "talker.model.norm.weight"))
    cp_layers = size(lambda n: n.startswith("talker.code_predictor.model.layers"))
    heads = size(lambda n: "lm_head" in n)
    return {"copy_bandwidth_tbs": bw / 1e12, "floor_talker_step_ms": talker / bw * 1e3,
            "floor_code_predictor_frame_ms": (15 * cp_layers + heads) / bw * 1e3}


def reference_ms_per_frame(model, cfg, frames: int = 8) -> float:
    """`tts_engine.reference.generate_codes` (eager torch, no graphs, no fused kernels), one stream: ms a frame."""
    from tts_engine.prompt import Layout, VoiceSpec, build_prompt
    from tts_engine.reference import GenerationInput, generate_codes
    from tts_engine.sampling import SamplingParams

    prompt = build_prompt(cfg, [151644, 77091, 198, *range(1000, 1012), 151645, 198, 151644, 77091, 198],
                          VoiceSpec("ryan", "english"), Layout.NON_STREAMING)
    inp = GenerationInput(prompt, SamplingParams(seed=1), 1, frames)
    generate_codes(model, [inp])  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    generate_codes(model, [inp])
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / frames
