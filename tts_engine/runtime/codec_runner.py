"""CodecRunner: batched incremental codec decoding over per-slot stream states, graph-captured on CUDA.

State pool: one `CodecState` with batch = max_streams + 1 (the last row is scratch): frames [N] and
rows [N, row_size], of which keys, values [layers, N, kv_heads, window - 1, head_dim] and history[i]
[N, C_i, n_i] are views. A slot is one stream's row. `decode(slots, codes [B, Q, t])` continues B streams by t frames in
one call: gather the slots' rows into a batch state, `CodecDecoder.decode_chunk`, scatter the rows
back. A batch may be padded up to a bucket with rows that point at the scratch slot: their PCM is
dropped and their state lands in scratch, which no stream reads.

On CUDA, `capture()` records that gather -> decode_chunk -> scatter as one graph per (chunk length
t, bucket); `decode` copies slot ids and codes into the graph's static inputs and replays it. What
no graph covers runs the same function eagerly; that eager function is the CPU path and the
reference the graphs are tested against (tests/runtime, tests/gpu). An fp32 codec runs with TF32 off
(eager and at capture), so the fast path equals `CodecDecoder.decode_chunk` to fp32 rounding, or
with `allow_tf32` on: its convs then run on tensor cores (~8x the fp32 rate; the codec's convs are
compute-bound from batch ~8 x 12 frames), at TF32's 10-bit mantissa.

cuDNN picks conv algorithms by timing them on CUDA (`cudnn.benchmark`, eager and capture, so both
use the same algorithms): with its heuristic picks, torch 2.11 on an H200 captured graphs whose
replay was wrong (a 768-channel k7 residual conv at t=3, batch 16, first capture in a process; the
eager step was right). The timed picks replay correctly and run faster. As a guard, `capture()`
replays every graph once against the eager step and drops any that disagree.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..model.codec import CodecDecoder, CodecState
from .host import staged, to_device
from .options import FastPathOptions
from .progress import Phase

# Captured chunk lengths: the default schedule's (1, 2, 4, 8, 12) and enough others that a final
# chunk of any length up to 12 is at most two replays (5 = 4 + 1, 7 = 6 + 1, 11 = 8 + 3); each
# length costs a graph per bucket and its capture time (cuDNN times every shape).
CHUNK_SIZES = (1, 2, 3, 4, 6, 8, 12)
BUCKETS = (1, 2, 4, 8, 16, 32)
# Left-context states kept (`start`): one state row each (~3 MB in bf16 for the real codec), so a voice
# that streams again starts with one copy instead of decoding its whole reference again.
CONTEXT_STATES = 32


def served_codec(codec: CodecDecoder, on_cuda: bool, precision: str | None,
                 options: FastPathOptions | None = None) -> tuple[CodecDecoder, str]:
    """The codec as the engine serves it, and its precision: None is bf16 on CUDA, fp32 on CPU; bf16
    casts the weights. On CUDA its fast path (`use_fused_kernels` with `options`' codec_* kernel
    choices); the CPU engine stays all-torch."""
    precision = precision or ("bf16" if on_cuda else "fp32")
    if precision == "bf16":
        codec = codec.to(torch.bfloat16)
    if on_cuda:
        o = options or FastPathOptions()
        codec.use_fused_kernels(window_max=o.codec_window_max, rope_kv=o.codec_rope_kv,
                                conv_windows=o.codec_conv_windows, channels_last=o.codec_channels_last,
                                act_in_window=o.codec_act_in_window)
    return codec, precision


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    slot_ids: torch.Tensor  # [bucket] static input
    codes: torch.Tensor  # [bucket, Q, t] static input
    pcm: torch.Tensor  # [bucket, t * samples_per_frame] static output
    s16: torch.Tensor  # the same as int16 samples (`pcm_to_s16`), made by the same replay


def pcm_to_s16(pcm: torch.Tensor) -> torch.Tensor:
    """float PCM -> int16 samples on its device, as `engine.audio.to_s16` makes them on the host: clamped to
    [-1, 1], times 32767 in fp32, rounded half to even."""
    return pcm.float().clamp(-1.0, 1.0).mul_(32767.0).round_().to(torch.int16)


@contextlib.contextmanager
def cuda_numerics(tf32: bool) -> Iterator[None]:
    """Timed cuDNN algorithm choice, and fp32 matmuls/convs on TF32 tensor cores or exact (`tf32`),
    for the duration (global flags, restored after)."""
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = cuda.allow_tf32, cudnn.allow_tf32, cudnn.benchmark
    cudnn.benchmark = True
    cuda.allow_tf32 = cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        cuda.allow_tf32, cudnn.allow_tf32, cudnn.benchmark = saved


class CodecRunner:
    def __init__(self, codec: CodecDecoder, max_streams: int, *, chunk_sizes: tuple[int, ...] = CHUNK_SIZES,
                 buckets: tuple[int, ...] = BUCKETS, use_graphs: bool | None = None,
                 pad_batches: bool | None = None, allow_tf32: bool = False):
        """use_graphs: replay captured graphs (default: on CUDA; `capture()` must still be called).
        pad_batches: pad eager batches to a bucket too (default: as use_graphs; tests use it on CPU
        to exercise the scratch rows)."""
        if max_streams < 1:
            raise ValueError("max_streams must be >= 1")
        if not chunk_sizes or min(chunk_sizes) < 1:
            raise ValueError("chunk_sizes must be frame counts >= 1")
        if not buckets or min(buckets) < 1:
            raise ValueError("buckets must be batch sizes >= 1")
        self.codec = codec
        weight = codec.pre_conv.conv.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.use_graphs = self.device.type == "cuda" if use_graphs is None else use_graphs
        self.pad_batches = self.use_graphs if pad_batches is None else pad_batches
        self.tf32 = allow_tf32
        self.max_streams = max_streams
        self.scratch = max_streams
        self.chunk_sizes = tuple(sorted(set(chunk_sizes)))
        # No bucket beyond the first one that holds every stream: larger ones would only pad.
        buckets = sorted(set(buckets))
        self.buckets = tuple(b for b in buckets if b < max_streams) + tuple(b for b in buckets if b >= max_streams)[:1]
        self.state = codec.new_state(max_streams + 1)
        self.graphs: dict[tuple[int, int], _Graph] = {}
        self._contexts: OrderedDict[bytes, tuple[torch.Tensor, int]] = OrderedDict()  # digest -> (row, frames)

    # -- slots ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def reset(self, slot: int) -> None:
        """Zero a slot's state: its next chunk decodes as the start of a fresh stream."""
        if not 0 <= slot < self.max_streams:
            raise ValueError(f"slot {slot} is outside 0..{self.max_streams - 1}")
        self._zero(slot)

    @torch.inference_mode()
    def start(self, slot: int, context: torch.Tensor | None = None) -> None:
        """A new stream in `slot`: its state zeroed, or with `context` (codes [frames, Q], an in-context cloned
        voice's reference) the state after decoding those codes, their PCM dropped. The reference implementation
        decodes reference + new codes in one piece and cuts the reference's samples off; a stream that starts
        from this state gives those samples chunk by chunk (decoding is causal). The state is computed once per
        context and kept (`CONTEXT_STATES`, least recently used dropped)."""
        self.reset(slot)
        if context is None or context.shape[0] == 0:
            return
        q = self.codec.cfg.num_quantizers
        if context.dim() != 2 or context.shape[1] != q:
            raise ValueError(f"context must be [frames, {q}] codes, got {tuple(context.shape)}")
        host = context.detach().to("cpu", torch.long).contiguous()
        key = hashlib.blake2b(host.numpy().tobytes(), digest_size=16).digest() + host.shape[0].to_bytes(4, "little")
        kept = self._contexts.get(key)
        if kept is not None:
            self._contexts.move_to_end(key)
            row, frames = kept
            self.state.rows[slot].copy_(row)
            self.state.frames[slot].fill_(frames)
            return
        self._decode([slot], host.T[None].to(self.device))
        self._contexts[key] = (self.state.rows[slot].clone(), host.shape[0])
        while len(self._contexts) > CONTEXT_STATES:
            self._contexts.popitem(last=False)

    def _zero(self, slot: int) -> None:
        # Two kernels: the slot's frame counter and its float state row (keys, values, every conv
        # history). `zero_()`, not `= 0`: that copies a pageable host scalar, which waits for the stream.
        self.state.frames[slot].zero_()
        self.state.rows[slot].zero_()

    def _gather(self, slot_ids: torch.Tensor) -> CodecState:
        s = self.state
        return self.codec.state_of(s.rows.index_select(0, slot_ids), s.frames.index_select(0, slot_ids))

    def _scatter(self, slot_ids: torch.Tensor, batch: CodecState) -> None:
        # Padding rows all name the scratch slot; which of them lands there last does not matter.
        self.state.frames.index_copy_(0, slot_ids, batch.frames)
        self.state.rows.index_copy_(0, slot_ids, batch.rows)

    def _step(self, slot_ids: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """The captured function and the eager reference: slot_ids [B], codes [B, Q, t] -> PCM [B, t * spf]."""
        batch = self._gather(slot_ids)
        pcm, batch = self.codec.decode_chunk(codes, batch)
        self._scatter(slot_ids, batch)
        return pcm

    # -- decoding ------------------------------------------------------------------------------
    def _precision(self):
        return cuda_numerics(self.tf32) if self.device.type == "cuda" else contextlib.nullcontext()

    def _check(self, slots: list[int], codes: torch.Tensor) -> None:
        q = self.codec.cfg.num_quantizers
        if not slots:
            raise ValueError("decode needs at least one slot")
        if codes.dim() != 3 or codes.shape[0] != len(slots) or codes.shape[1] != q or codes.shape[2] < 1:
            raise ValueError(f"codes must be [{len(slots)}, {q}, t >= 1] for {len(slots)} slots, "
                             f"got {tuple(codes.shape)}")
        if codes.is_floating_point() or codes.is_complex():
            raise ValueError("codes must be integer code ids")
        if len(set(slots)) != len(slots):
            raise ValueError(f"slots must be distinct, got {slots}")
        if any(not 0 <= s < self.max_streams for s in slots):
            raise ValueError(f"slots must lie in 0..{self.max_streams - 1}, got {slots}")

    def _bucket(self, n: int) -> int:
        return next(b for b in self.buckets if b >= n)

    def _split(self, t: int, bucket: int) -> list[int]:
        """Chunk length -> pieces that sum to it, each the largest available length that fits
        (captured lengths for this bucket when graphs exist, else `chunk_sizes`); a remainder that
        nothing covers stays one eager piece. Exact: decoding is causal and chunking-invariant."""
        if self.use_graphs and self.graphs:
            sizes = sorted((n for n, b in self.graphs if b == bucket), reverse=True)
        else:
            sizes = list(reversed(self.chunk_sizes))
        pieces = []
        while t > 0:
            n = next((s for s in sizes if s <= t), t)
            pieces.append(n)
            t -= n
        return pieces

    @torch.inference_mode()
    def decode(self, slots: list[int], codes: torch.Tensor, *, s16: bool = False) -> torch.Tensor:
        """Continue the streams in `slots` (distinct) by codes [B, Q, t] -> PCM [B, t * spf] on the
        codec's device, ready in the caller's stream order: in the codec's dtype, or with `s16` as int16
        samples (`pcm_to_s16`; a graph makes them in its replay: half the bytes to copy, no host
        conversion). Batches above the largest bucket and chunks longer than the captured lengths are
        split; each slot's state advances by t frames."""
        self._check(slots, codes)
        return self._decode(slots, codes, s16)

    def _decode(self, slots: list[int], codes: torch.Tensor, s16: bool = False) -> torch.Tensor:
        step = self.buckets[-1]
        out = [self._decode_group(slots[i:i + step], codes[i:i + step], s16) for i in range(0, len(slots), step)]
        return out[0] if len(out) == 1 else torch.cat(out)

    def _decode_group(self, slots: list[int], codes: torch.Tensor, s16: bool) -> torch.Tensor:
        n, bucket = len(slots), self._bucket(len(slots))
        pieces, start = [], 0
        for t in self._split(codes.shape[2], bucket):
            chunk = codes[:, :, start:start + t]
            graph = self.graphs.get((t, bucket)) if self.use_graphs else None
            if graph is not None:
                graph.slot_ids.copy_(staged(slots + [self.scratch] * (bucket - n), self.device), non_blocking=True)
                graph.codes[:n].copy_(chunk, non_blocking=True)  # padding rows keep old, valid codes
                graph.graph.replay()
                # the static output is overwritten by the next replay
                pieces.append((graph.s16 if s16 else graph.pcm)[:n].clone())
            else:
                pcm = self._eager(slots, chunk, bucket if self.pad_batches else n)
                pieces.append(pcm_to_s16(pcm) if s16 else pcm)
            start += t
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)

    def _eager(self, slots: list[int], codes: torch.Tensor, rows: int) -> torch.Tensor:
        n = len(slots)
        slot_ids = to_device(slots + [self.scratch] * (rows - n), self.device)
        codes = codes.to(self.device, torch.long)
        if rows > n:
            codes = torch.cat([codes, codes.new_zeros(rows - n, *codes.shape[1:])])
        with self._precision():
            return self._step(slot_ids, codes)[:n]

    # -- CUDA graphs -----------------------------------------------------------------------------
    @torch.inference_mode()
    def capture(self, max_batch_frames: int | None = None) -> dict[str, object]:
        """Capture one graph per (chunk length, bucket), largest first, sharing one memory pool.

        Combinations with t * bucket > max_batch_frames are skipped (capture time and pool size
        grow with it), as are those whose warm-up runs out of memory. Returns what was captured,
        what was skipped and the seconds it took."""
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        t0 = time.perf_counter()
        combos = sorted(((t, b) for t in self.chunk_sizes for b in self.buckets),
                        key=lambda c: (c[0] * c[1], c[0]), reverse=True)
        skipped = [c for c in combos if max_batch_frames is not None and c[0] * c[1] > max_batch_frames]
        pool = torch.cuda.graph_pool_handle()
        q = self.codec.cfg.num_quantizers
        # cuDNN times every conv of every shape here (`cuda_numerics`): most of the phase.
        with Phase("codec graphs", len(combos) - len(skipped)) as phase:
            with self._precision():
                for t, bucket in (c for c in combos if c not in skipped):
                    slot_ids = torch.full((bucket,), self.scratch, device=self.device)
                    codes = torch.zeros(bucket, q, t, dtype=torch.long, device=self.device)
                    stream = torch.cuda.Stream()
                    stream.wait_stream(torch.cuda.current_stream())
                    try:
                        with torch.cuda.stream(stream):
                            for _ in range(2):  # warm-up: allocator, cuBLAS/cuDNN handles and plans
                                self._step(slot_ids, codes)
                    except torch.OutOfMemoryError:
                        torch.cuda.current_stream().wait_stream(stream)
                        torch.cuda.empty_cache()
                        skipped.append((t, bucket))
                        phase.step(f"{t} frames x {bucket}: out of memory, skipped")
                        continue
                    torch.cuda.current_stream().wait_stream(stream)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        pcm = self._step(slot_ids, codes)
                        s16 = pcm_to_s16(pcm)
                    self.graphs[(t, bucket)] = _Graph(graph, slot_ids, codes, pcm, s16)
                    phase.step(f"{t} frames x {bucket}")
            torch.cuda.synchronize()
            errors = self.verify_graphs()
        return {"captured": sorted(self.graphs), "skipped": sorted(skipped),
                "mismatched": sorted(k for k in errors if k not in self.graphs),
                "max_error": max(errors.values(), default=0.0), "seconds": round(time.perf_counter() - t0, 3)}

    def _scratch_rows(self) -> list[torch.Tensor]:
        s, i = self.state, self.scratch
        return [s.frames[i], s.keys[:, i], s.values[:, i], *(h[i] for h in s.history)]

    @torch.inference_mode()
    def verify_graphs(self, tol: float | None = None) -> dict[tuple[int, int], float]:
        """Replay every graph on scratch rows with random codes, compare with the eager step from the
        same state, and drop graphs that disagree (their shapes then run eagerly or split). Returns
        the max abs PCM error per graph; the scratch row is restored, real slots are not touched."""
        if tol is None:
            tol = 1e-3 if self.dtype == torch.float32 and not self.tf32 else 5e-2
        gen = torch.Generator().manual_seed(0)
        rows = self._scratch_rows()
        saved = [r.clone() for r in rows]
        errors: dict[tuple[int, int], float] = {}
        for key, g in list(self.graphs.items()):
            g.slot_ids.fill_(self.scratch)
            g.codes.copy_(torch.randint(0, self.codec.cfg.codebook_size, tuple(g.codes.shape), generator=gen))
            g.graph.replay()
            got = g.pcm.float().clone()
            for r, v in zip(rows, saved):
                r.copy_(v)
            with self._precision():
                want = self._step(g.slot_ids, g.codes).float()
            for r, v in zip(rows, saved):
                r.copy_(v)
            errors[key] = (got - want).abs().max().item()
            if not errors[key] <= tol:  # NaN counts as a mismatch
                del self.graphs[key]
        return errors
