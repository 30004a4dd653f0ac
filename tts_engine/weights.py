"""safetensors loading by official tensor names: single file or sharded, any dtype, any device.

The module is built on the meta device and every parameter is replaced by the tensor read from
disk, so loading a 1.7B model costs one read of the file and no random initialisation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn


class CheckpointError(ValueError):
    """The checkpoint directory does not hold what the model needs."""


def safetensors_files(directory: Path, stem: str = "model") -> list[Path]:
    """`model.safetensors`, or the shards named by `model.safetensors.index.json`."""
    single = directory / f"{stem}.safetensors"
    index = directory / f"{stem}.safetensors.index.json"
    if single.exists():
        return [single]
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [directory / name for name in sorted(set(weight_map.values()))]
    raise CheckpointError(f"no {single.name} or {index.name} in {directory}")


def expected_tensors(module: nn.Module) -> dict[str, torch.Size]:
    return {name: t.shape for name, t in module.state_dict(keep_vars=True).items()}


def load_into(module: nn.Module, files: list[Path], *, prefix: str = "",
              ignore_prefixes: tuple[str, ...] = (), dtype: torch.dtype | None = None,
              device: str | torch.device = "cpu",
              on_bytes: Callable[[int], None] | None = None) -> nn.Module:
    """Fill `module` (typically built on the meta device) from safetensors `files`.

    Tensor `prefix + name` in the files maps to `name` in the module. Tensors under
    `ignore_prefixes` are skipped (e.g. the codec encoder, which the engine never runs). Any
    missing, unexpected or mis-shaped tensor raises one CheckpointError naming all of them.
    Floating-point tensors are cast to `dtype` when given. `on_bytes(n)` after each tensor read
    (n = its size on disk), for progress reporting. The parameters come back without gradients: the
    engine only infers, and a weight that requires grad makes torch.matmul(weight [N, K], x [B, K, T])
    copy x transposed and its output (its fold for autograd), two full copies of every such product.
    """
    expected = expected_tensors(module)
    loaded: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    for path in files:
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                if any(key.startswith(p) for p in ignore_prefixes):
                    continue
                if not key.startswith(prefix) or key[len(prefix):] not in expected:
                    unexpected.append(key)
                    continue
                t = f.get_tensor(key)
                if on_bytes is not None:
                    on_bytes(t.numel() * t.element_size())
                if dtype is not None and t.is_floating_point():
                    t = t.to(dtype)
                loaded[key[len(prefix):]] = t
    missing = sorted(set(expected) - set(loaded))
    bad_shape = sorted(f"{prefix}{k}: file {tuple(t.shape)} != model {tuple(expected[k])}"
                       for k, t in loaded.items() if t.shape != expected[k])
    if missing or unexpected or bad_shape:
        lines = [f"checkpoint {files[0].parent} does not match the model:"]
        lines += [f"  missing: {prefix}{k}" for k in missing]
        lines += [f"  unexpected: {k}" for k in sorted(unexpected)]
        lines += [f"  shape: {s}" for s in bad_shape]
        raise CheckpointError("\n".join(lines))
    module.load_state_dict(loaded, strict=True, assign=True)
    module.requires_grad_(False)
    _materialize_buffers(module, device)
    return module


def _materialize_buffers(module: nn.Module, device: str | torch.device) -> None:
    """Non-persistent buffers built on the meta device have no data: rebuild them on `device`."""
    for sub in module.modules():
        for name, buf in list(sub._buffers.items()):
            if buf is not None and buf.is_meta:
                raise CheckpointError(f"buffer {name} of {type(sub).__name__} was not loaded")
