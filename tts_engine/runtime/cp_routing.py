"""Which kernels and launches a code-predictor pass takes, by its token rows: a mixin of
runtime/code_predictor.py's CodePredictorRunner, whose settings it reads (`gemv_rows`, `mma_rows`, `pdl`,
`early_trigger`; the CUDA products `gemv_kernel` with `gemv_kernel_rows`, `rows_pdl`, `rows_norms`, `rows_early`) and
whose weights (`stack`, `heads`) it asks the kernel about. Plain predicates over those: the runner's passes and draws
ask them as they launch, and tests set the settings and ask them on the CPU.

    product(rows) / rows_product(rows)        the CUDA products of a GEMV pass / of a pass past them, or None
    norm_rows(rows)                           does that pass take its norms inside the products
    pass_pdl(rows) / uses_pdl(rows)           does the pass launch under PDL (any path / the GEMV and mma paths)
    trigger(name, pdl) / rows_trigger(...)    a launch's `pdl`, PDL_EARLY where it may let the next start early
    draw_pdl(b, pdl, last)                    a draw's
"""

from __future__ import annotations

import torch

from ..kernels.backend import PDL_EARLY
from ..kernels.cp_gemv import CpGemv
from .cp_launch import EARLY_TRIGGER_LAUNCHES, PDL_ROWS, ROWS_EARLY_LAUNCHES


class PassRouting:
    # what CodePredictorRunner holds and these read
    gemv_kernel: CpGemv | None
    gemv_rows: int
    mma_rows: int
    gemv_kernel_rows: int
    pdl: bool
    rows_pdl: bool
    rows_norms: bool
    early_trigger: tuple[str, ...]
    rows_early: tuple[str, ...]
    _rows_take: dict[tuple[int, int], bool]  # norm_rows' answers by (rows, the kernel's id)

    def product(self, rows: int) -> CpGemv | None:
        """What computes a pass's products (`gemv`'s signature): the CUDA kernel (`gemv_kernel`) in PDL passes of one
        row and in the passes that take their norms inside its rows (`norm_rows`), else None (`gemv`)."""
        if self.gemv_kernel is not None and rows == 1 and self.uses_pdl(rows):  # uses_pdl: a GEMV pass
            return self.gemv_kernel
        if self.norm_rows(rows):
            return self.gemv_kernel
        return None

    def rows_product(self, rows: int) -> CpGemv | None:
        """What computes the products (and the head) of a pass of `rows` token rows past the GEMV passes where it takes
        them: the CUDA kernel's rows (`gemv_kernel`, up to `gemv_kernel_rows`), else None (cuBLAS)."""
        return self.gemv_kernel if self.gemv_kernel is not None and rows <= self.gemv_kernel_rows else None

    def norm_rows(self, rows: int) -> bool:
        """Does a pass of `rows` token rows past the GEMV passes run on the CUDA kernel's rows with its norms in their
        products (`rows_norms`: `fused.decoder_step_gemv` with the kernel as its product, the final norm in the head's
        prologue): where `rows_product` is the kernel and it takes each product so."""
        if not self.rows_norms or rows <= max(self.gemv_rows, self.mma_rows) or self.rows_product(rows) is None:
            return False
        key = (rows, id(self.gemv_kernel))
        if key not in self._rows_take:
            self._rows_take[key] = self._rows_take_norms(rows)
        return self._rows_take[key]

    def _rows_take_norms(self, rows: int) -> bool:
        kernel, c, layer = self.gemv_kernel, self.stack, self.stack.layers[0]
        x = torch.empty(rows, c.layers[0].w_qkv.shape[1], device=self.device, dtype=self.dtype)
        act = torch.empty(rows, c.intermediate, device=self.device, dtype=self.dtype)
        attn = torch.empty(rows, c.q_size, device=self.device, dtype=self.dtype)
        return (kernel.takes(x, layer.w_qkv, norm=(layer.ln_in, c.eps))
                and kernel.takes(x, layer.w_gate_up, norm=(layer.ln_post, c.eps), silu_mul=True)
                and kernel.takes(attn, layer.w_o, residual=x) and kernel.takes(act, layer.w_down, residual=x)
                and kernel.takes(x, self.heads[0], norm=(c.norm, c.eps)))

    def pass_pdl(self, rows: int) -> bool:
        """Does a pass of `rows` token rows launch its kernels with PDL: those of `uses_pdl`, and with `rows_pdl` the
        passes past the GEMV ones whose products are the CUDA kernel's rows (`rows_product`)."""
        if rows <= max(self.gemv_rows, self.mma_rows):
            return self.uses_pdl(rows)
        return self.pdl and self.rows_pdl and self.rows_product(rows) is not None

    def uses_pdl(self, rows: int) -> bool:
        """Does a pass of `rows` token rows launch its kernels with PDL: the GEMV passes of up to PDL_ROWS rows and
        the tensor-core ones (mma_rows)."""
        return self.pdl and (rows <= min(PDL_ROWS, self.gemv_rows) or self.gemv_rows < rows <= self.mma_rows)

    def trigger(self, name: str, pdl: bool) -> bool | int:
        """A launch's `pdl`: PDL_EARLY where it is a PDL launch that `early_trigger` names."""
        if not pdl or not self.early_trigger:
            return pdl
        unknown = set(self.early_trigger) - set(EARLY_TRIGGER_LAUNCHES)
        if unknown:
            raise ValueError(f"early_trigger names launches of {EARLY_TRIGGER_LAUNCHES} only, got {sorted(unknown)}")
        return PDL_EARLY if name in self.early_trigger else pdl

    def rows_trigger(self, name: str, pdl: bool) -> bool | int:
        """A rows pass's launch's `pdl`: PDL_EARLY where it is a PDL launch that `rows_early` names."""
        unknown = set(self.rows_early) - set(ROWS_EARLY_LAUNCHES)
        if unknown:
            raise ValueError(f"rows_early names launches of {ROWS_EARLY_LAUNCHES} only, got {sorted(unknown)}")
        return PDL_EARLY if pdl and name in self.rows_early else pdl

    def draw_pdl(self, b: int, pdl: bool, last: bool) -> bool | int:
        """A draw's `pdl` at batch b (`pdl`: its passes'): early where its passes' launches name it and it is not the
        frame's last (or one before the persistent pass)."""
        if last:
            return pdl
        return self.trigger("draw", pdl) if self.uses_pdl(b) else self.rows_trigger("draw", pdl)
