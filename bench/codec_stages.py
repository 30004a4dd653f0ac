"""bench.latency's codec part: one incremental codec call as a CUDA graph per batch and chunk length
(eager and graph, first and incremental chunks), per precision with its PCM error against exact fp32,
and profiles of the calls a loaded server makes."""

from __future__ import annotations

import copy

import torch

from bench.cuda_timing import cuda_time_ms, graph_of
from tts_engine.runtime.codec_runner import cuda_numerics, served_codec


def incremental_chunk(codec, b: int, t: int):
    """A callable that decodes b streams x t frames continuing 30 frames of state (restored before
    every call, so each replay does the same work); call under inference mode."""
    codes = torch.randint(0, 2048, (b, 16, t), device="cuda")
    warm = codec.new_state(b)
    codec.decode_chunk(torch.randint(0, 2048, (b, 16, 30), device="cuda"), warm)
    keep = [x.clone() for x in warm.tensors()]

    def incremental():
        for dst, src in zip(warm.tensors(), keep):
            dst.copy_(src)
        codec.decode_chunk(codes, warm)

    return incremental


def codec_times(codec, batches) -> dict:
    out = {}
    with torch.inference_mode():
        for b in batches:
            row = {}
            for t in (1, 2, 4, 8, 12):
                codes = torch.randint(0, 2048, (b, 16, t), device="cuda")
                fresh = codec.new_state(b)
                incremental = incremental_chunk(codec, b, t)

                def first(_codes=codes, _fresh=fresh):
                    for x in _fresh.tensors():
                        x.zero_()
                    codec.decode_chunk(_codes, _fresh)

                row[f"eager_first_{t}f_ms"] = cuda_time_ms(first, 3, 10)
                row[f"eager_incremental_{t}f_ms"] = cuda_time_ms(incremental, 3, 10)
                row[f"graph_first_{t}f_ms"] = cuda_time_ms(graph_of(first))
                row[f"graph_incremental_{t}f_ms"] = cuda_time_ms(graph_of(incremental))
            out[b] = row
            print(f"codec batch {b}: {row}", flush=True)
    return out


def window_of(name: str) -> dict:
    """use_fused_kernels' keywords for a variant name: window_max from `+cudnn-window` (0) or `+window=N`
    (N; `+window-convs` or neither: the default, WINDOW_GEMM_MAX), rope_kv from `+rope-kv` (True) or
    `+torch-rope-kv` (False; neither: the default, ROPE_KV_KERNEL), conv_windows from `+conv-window` /
    `+torch-conv-window` (neither: CONV_WINDOW_KERNEL)."""
    out = {}
    for part in name.split("+"):
        if part == "cudnn-window":
            out["window_max"] = 0
        elif part.startswith("window="):
            out["window_max"] = int(part.split("=", 1)[1])
        elif part in ("rope-kv", "torch-rope-kv"):
            out["rope_kv"] = part == "rope-kv"
        elif part in ("conv-window", "torch-conv-window"):
            out["conv_windows"] = part == "conv-window"
    return out


def codec_precision_times(codec, batches=(1, 8, 32, 64), frames=(1, 2, 12),
                          names: tuple[str, ...] | None = None) -> dict:
    """The incremental chunk as a CUDA graph at each codec precision (fp32 exact, TF32 convs and
    matmuls, bf16 weights and activations; cuDNN's timed algorithm choice, as the server runs it;
    `+fused`: the codec's fast path as the server runs it on CUDA, `use_fused_kernels`), and each
    one's PCM error against exact all-torch fp32 on one 24-frame decode (SNR in dB). names: the
    variants to time (default all), in that order; a name may repeat (`name#2`) to time it again."""
    gen = torch.Generator().manual_seed(0)
    probe = torch.randint(0, 2048, (1, 16, 24), generator=gen).cuda()
    out = {}
    with torch.inference_mode():
        with cuda_numerics(False):
            ref = codec.decode_chunk(probe, codec.new_state(1))[0].float()
        # "+cudnn-convs": the fast path with the transposed and pointwise convs left to cuDNN (run 11's);
        # "+cudnn-window" / "+window-convs" / "+window=N": the dense convs of kernel > 1 with cuDNN, as
        # window GEMMs up to the default size, up to N elements; "+rope-kv": the window transformer's RoPE
        # and K/V window as one kernel a layer (window_of).
        for key in names or ("fp32", "tf32", "tf32+fused", "bf16+fused", "bf16+fused+cudnn-convs",
                             "bf16+fused+cudnn-window", "bf16+fused+window-convs"):
            name = key.split("#")[0]
            model = copy.deepcopy(codec)
            if name.startswith("bf16"):
                model = model.to(torch.bfloat16)
            model.use_fused_kernels("fused" in name, gemm_convs="cudnn-convs" not in name, **window_of(name))
            row = {}
            with cuda_numerics(name.startswith("tf32")):
                pcm = model.decode_chunk(probe, model.new_state(1))[0].float()
                err = (pcm - ref).pow(2).mean()
                row["snr_db_vs_fp32"] = float("inf") if err == 0 else float(10 * torch.log10(ref.pow(2).mean() / err))
                for b in batches:
                    for t in frames:
                        row[f"b{b}_{t}f_ms"] = cuda_time_ms(graph_of(incremental_chunk(model, b, t)))
            out[key] = row
            print(f"codec {key}: {row}", flush=True)
            del model
    return out


def codec_profile(codec, b: int = 8, t: int = 12, precision: str = "bf16", **fast_path) -> list[dict]:
    """Top CUDA kernels of one incremental chunk (b streams x t frames, the fast path; bf16 as served
    by default, or tf32), from the torch profiler. fast_path: use_fused_kernels' keywords."""
    from torch.profiler import ProfilerActivity, profile

    codec, _ = served_codec(copy.deepcopy(codec), True, precision, **fast_path)
    with torch.inference_mode(), cuda_numerics(precision == "tf32"):
        state = codec.new_state(b)
        codes = torch.randint(0, 2048, (b, 16, t), device="cuda")
        for _ in range(3):
            codec.decode_chunk(codes, state)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            codec.decode_chunk(codes, state)
            torch.cuda.synchronize()
    rows = [{"kernel": e.key[:120], "count": e.count, "cuda_ms": e.device_time_total / 1e3}
            for e in prof.key_averages()]
    rows.sort(key=lambda r: -r["cuda_ms"])
    return rows[:25]
