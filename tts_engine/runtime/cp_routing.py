"""Which kernels and launches a code-predictor pass takes, by its token rows: a mixin of
runtime/code_predictor.py's CodePredictorRunner, whose settings it reads (`gemv_rows`, `pdl`, `early_trigger`; the
CUDA products `gemv_kernel` with `gemv_kernel_rows`, `rows_pdl`, `rows_early`). Plain predicates over those: the
runner's passes and draws ask them as they launch, and tests set the settings and ask them on the CPU.

    product(rows) / rows_product(rows)        the CUDA products of a GEMV pass / of a pass past them, or None
    pass_pdl(rows) / uses_pdl(rows)           does the pass launch under PDL (any path / the GEMV path)
    trigger(name, pdl) / rows_trigger(...)    a launch's `pdl`, PDL_EARLY where it may let the next start early
    draw_pdl(b, pdl, last)                    a draw's
"""

from __future__ import annotations

from ..kernels.backend import PDL_EARLY
from ..kernels.cp_gemv import CpGemv
from .cp_launch import EARLY_TRIGGER_LAUNCHES, PDL_ROWS, ROWS_EARLY_LAUNCHES


class PassRouting:
    # what CodePredictorRunner holds and these read
    gemv_kernel: CpGemv | None
    gemv_rows: int
    gemv_kernel_rows: int
    pdl: bool
    rows_pdl: bool
    early_trigger: tuple[str, ...]
    rows_early: tuple[str, ...]

    def product(self, rows: int) -> CpGemv | None:
        """What computes a GEMV pass's products (`gemv`'s signature): the CUDA kernel (`gemv_kernel`) in PDL passes of
        one row, else None (`gemv`)."""
        if self.gemv_kernel is not None and rows == 1 and self.uses_pdl(rows):
            return self.gemv_kernel
        return None

    def rows_product(self, rows: int) -> CpGemv | None:
        """What computes the products (and the head) of a pass of `rows` token rows past the GEMV passes where it takes
        them: the CUDA kernel's rows (`gemv_kernel`, up to `gemv_kernel_rows`), else None (cuBLAS)."""
        return self.gemv_kernel if self.gemv_kernel is not None and rows <= self.gemv_kernel_rows else None

    def pass_pdl(self, rows: int) -> bool:
        """Does a pass of `rows` token rows launch its kernels with PDL: those of `uses_pdl`, and with `rows_pdl` the
        passes past the GEMV ones whose products are the CUDA kernel's rows (`rows_product`)."""
        if rows <= self.gemv_rows:
            return self.uses_pdl(rows)
        return self.pdl and self.rows_pdl and self.rows_product(rows) is not None

    def uses_pdl(self, rows: int) -> bool:
        """Does a GEMV pass of `rows` token rows launch its kernels with PDL: those of up to PDL_ROWS rows."""
        return self.pdl and rows <= min(PDL_ROWS, self.gemv_rows)

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
        frame's last."""
        if last:
            return pdl
        return self.trigger("draw", pdl) if self.uses_pdl(b) else self.rows_trigger("draw", pdl)
