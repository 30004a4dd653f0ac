"""The persistent code-predictor pass (kernels/cuda/cp_pass.cu through kernels/cp_pass.py) at the real 1.7B shapes in
bf16 with random weights: a pass gives the torch path's logits (to bf16 rounding) and writes its K/V; its frames,
captured in a CUDA graph with the draws between the passes, are deterministic replay after replay and give the
greedy codes of the Triton passes. The runners: tests/gpu/conftest.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.gpu.replays import graph_replays, rel_err
from tts_engine.runtime.fused import rms_norm

# kernels/cuda/cp_pass.cu's ways (macros): its defaults (the products read the weights in shared memory), the weights
# in registers from global memory (what `cp_persistent` builds: kernels/cp_pass.py DEFAULT_MACROS), staged through
# shared memory into registers (with the L2 asked ahead and the trace on), run 28's order of loads
VARIANTS = {"smem": (), "regs": ("CP_REG_WEIGHTS=1",), "staged": ("CP_REG_WEIGHTS=2", "CP_L2_AHEAD=2", "CP_TRACE=1"),
            "run28": ("CP_EARLY_RES=0", "CP_ATT_ONE_POLL=0")}


@pytest.fixture(scope="module", params=list(VARIANTS.values()), ids=list(VARIANTS))
def persistent(runners, request):
    _, (fast, _) = runners
    return fast.code_predictor.persistent_kernel(macros=request.param)


def test_persistent_pass_equals_torch(runners, persistent):
    """Passes at positions 2, 3 and 15 from the same cache: the kernel's logits and its new K/V against the torch
    path's, each pass's first-layer qkv product made as the table makes it."""
    cfg, (fast, ref) = runners
    fast_cp, ref_cp = fast.code_predictor, ref.code_predictor
    h = cfg.talker.code_predictor.hidden_size
    layer0 = fast_cp.stack.layers[0]
    g = torch.Generator(device="cuda").manual_seed(11)
    with torch.inference_mode():
        ref_cp.layers(torch.randn(1, 2, h, device="cuda", generator=g).bfloat16(), 1, 0)
        for pos in range(2, 16):  # every earlier position filled, so that position 15 sees a full cache
            ref_cp.layers(torch.randn(1, 1, h, device="cuda", generator=g).bfloat16(), 1, pos)
        for pos, codebook in ((2, 1), (3, 2), (15, 14)):
            fast_cp.k.copy_(ref_cp.k)
            fast_cp.v.copy_(ref_cp.v)
            x = torch.randn(1, 1, h, device="cuda", generator=g).bfloat16()
            qkv0 = F.linear(rms_norm(x[0], layer0.ln_in, fast_cp.stack.eps), layer0.w_qkv)
            got = persistent.launch(pos, x[0, 0], qkv0[0], codebook, pdl=False).clone()
            want = ref_cp.logits(*ref_cp.layers(x, 1, pos), codebook)
            assert not persistent.timed_out()
            assert rel_err(got, want) < 2e-2, f"logits at position {pos}"
            for name in ("k", "v"):
                new_got, new_want = getattr(fast_cp, name)[:, 0, :, pos], getattr(ref_cp, name)[:, 0, :, pos]
                assert rel_err(new_got, new_want) < 2e-2, f"{name} at position {pos}"
            # the earlier positions are read, not written
            assert torch.equal(fast_cp.k[:, 0, :, :pos], ref_cp.k[:, 0, :, :pos])
    if "CP_TRACE=1" in persistent.macros:  # every traced pass's phases are stamped, in order
        phases = persistent.trace_phases()
        assert phases["passes"] == 3 and phases["launch"] > 0, phases
        for kind in ("qkv", "att", "gu", "down", "head"):
            assert all(v >= 0 for v in phases[kind].values()) and sum(phases[kind].values()) > 0, (kind, phases)


def _triton_logits_along(cp, hidden, c0, codes):
    """The Triton passes of a batch-1 frame fed `codes` [1, 15] (teacher-forced) -> each codebook's logits [15, V]."""
    out, normed = cp.layers(torch.stack((cp.proj(hidden), cp.in_c0[c0]), dim=1), 1, 0)
    logits = [cp.logits(out, normed, 0)]
    for j in range(14):
        c = codes[:, j]
        out, normed = cp.layers(cp.inputs[j][c][:, None], 1, j + 2, cp.qkv_table[j][c])
        logits.append(cp.logits(out, normed, j + 1))
    return torch.cat(logits).float()


@pytest.mark.parametrize("seed", [0, 1])
def test_persistent_frames_replay_and_draw_what_the_triton_passes_would(runners, persistent, seed):
    """Batch-1 frames (the prefill on the Triton kernels, passes 1-14 persistent, each draw between them) captured in a
    graph as the engine captures them, inputs alternating between two: every replay gives its input's codes (a race
    between the CTAs, or a read before the draw's write, would not), and each greedy code is the argmax of the
    Triton passes' logits along the same codes (to bf16 rounding: near-ties may go either way)."""
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(1, cfg.talker.hidden_size, device="cuda", generator=g).bfloat16()
    inputs = (hidden.clone(), torch.randn(hidden.shape, device="cuda", generator=g).bfloat16())

    def alternate(i):
        hidden.copy_(inputs[i % 2])

    c0 = torch.tensor([17 + 900 * seed], device="cuda")
    frames = torch.tensor([3], device="cuda")
    rows = fast.rows.gather(torch.arange(1, device="cuda"))
    rows.sub_do_sample.zero_()  # greedy: the codes are the logits' argmax
    was = cp.persistent
    with torch.inference_mode():
        cp.persistent = persistent
        try:
            outs = graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL), n=10,
                                 before=alternate)
        finally:
            cp.persistent = was
        assert not persistent.timed_out()
        differ = [i for i, got in enumerate(outs) if not torch.equal(got, outs[i % 2])]
        assert not differ, f"replays {differ} differ from their input's first"
        assert len(torch.cat(outs[:2]).unique()) > 2
        for i in (0, 1):
            logits = _triton_logits_along(cp, inputs[i], c0, outs[i])  # [15, V]
            picked = logits.gather(1, outs[i].view(15, 1))[:, 0]
            best = logits.max(dim=1).values
            slack = 2e-2 * logits.abs().amax(dim=1)
            assert (picked >= best - slack).all(), \
                f"input {i}: codes {outs[i].tolist()}, their logits {picked.tolist()}, the best {best.tolist()}"


def test_persistent_pass_reports_bad_arguments(persistent):
    h = persistent.shapes.hidden
    x = torch.zeros(h, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="position"):
        persistent.launch(16, x, persistent.qkv, 1)
    with pytest.raises(ValueError, match="x_in"):
        persistent.launch(2, x.float(), persistent.qkv, 1)
