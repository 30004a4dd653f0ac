"""Keep the CPUs out of deep idle states while the server runs: a Linux PM QoS request.

A request's way to first audio crosses threads several times (the client's bytes wake the event loop,
the open wakes the engine thread, the device's completion wakes it again, its first audio wakes the
loop), and each wake on an idle core pays the core's exit from its idle state; on a VM the host's
halt-polling and frequency. On the 2-core CPU machine, a tokenizer call that takes 21 µs back to back
took 126-175 µs after 20 ms of sleep, 32 µs after 20 ms of spinning, and 43 µs after a sleep with this
request held (docs/perf-notes.md "Version 13"). Run 17's GPU host has no cpuidle driver (its idle is the
hypervisor's): there the request changed nothing measurable, so `cadence serve` does not hold it unless
asked (`--cpu-wake-latency-us`).

The kernel's interface (Documentation/power/pm_qos_interface.rst): while a process holds
/dev/cpu_dma_latency open with a 32-bit latency bound written to it, no CPU enters an idle state whose
exit latency exceeds the bound; closing the file (or the process ending) drops the request. A bound of
0 keeps idle CPUs polling: lower wake latency for more power drawn while idle. Writing needs root (or
the device's permission); where it cannot be held the server says so once and runs without it.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)
DEVICE = Path("/dev/cpu_dma_latency")


class CpuWakeLatency:
    """`with CpuWakeLatency(max_us):` holds the PM QoS request for the block's duration. `held`: whether
    the kernel took it (False where the device is missing or not writable; the reason is `problem`)."""

    def __init__(self, max_us: int, device: Path = DEVICE):
        if not isinstance(max_us, int) or isinstance(max_us, bool) or not 0 <= max_us < 2**31:
            raise ValueError(f"a CPU wake-latency bound is a whole number of microseconds >= 0, got {max_us!r}")
        self.max_us, self.device = max_us, device
        self.held = False
        self.problem: str | None = None
        self._fd: int | None = None

    def __enter__(self) -> CpuWakeLatency:
        try:
            fd = os.open(self.device, os.O_WRONLY)
        except OSError as e:
            self.problem = f"cannot open {self.device}: {e.strerror}"
        else:
            try:
                os.write(fd, struct.pack("=i", self.max_us))  # the binary form: a native 32-bit int
            except OSError as e:
                os.close(fd)
                self.problem = f"cannot write {self.device}: {e.strerror}"
            else:
                self._fd, self.held = fd, True
        if self.held:
            log.info("holding CPU wake latency <= %d us (%s) while serving", self.max_us, self.device)
        else:
            log.warning("CPU wake latency not held (%s): idle cores may add wake-up time to first audio",
                        self.problem)
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self.held = None, False
