"""Host-to-device copies that do not stall the host.

A copy from pageable host memory first waits for everything already queued on the stream, so
with frame steps in flight it would block the engine thread until they finish. Small index
tensors therefore go through pinned memory (torch's caching host allocator) and non_blocking.
"""

from __future__ import annotations

import torch


def staged(values: list[int], device: torch.device) -> torch.Tensor:
    """int64 host tensor ready for `.to(device, non_blocking=True)`: pinned when `device` is CUDA."""
    t = torch.tensor(values, dtype=torch.long)
    return t.pin_memory() if device.type == "cuda" else t


def to_device(values: list[int], device: torch.device) -> torch.Tensor:
    return staged(values, device).to(device, non_blocking=True)
