"""The PM QoS request `cadence serve --cpu-wake-latency-us` holds (server/cpu_wake.py)."""

from __future__ import annotations

import os
import struct

import pytest

from tts_engine.server.cpu_wake import DEVICE, CpuWakeLatency


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_writes_the_bound_as_a_32_bit_int_and_holds_it_open_until_the_block_ends(tmp_path):
    device = tmp_path / "cpu_dma_latency"  # a plain file takes the write the kernel's device would
    device.write_bytes(b"")
    before = open_fds()
    with CpuWakeLatency(25, device) as held:
        assert held.held and held.problem is None
        assert device.read_bytes() == struct.pack("=i", 25)
        assert len(open_fds() - before) == 1, "the request lasts while its file stays open"
    assert not held.held
    assert open_fds() == before, "leaving the block drops the request (closes the file)"


def test_a_missing_or_unwritable_device_is_reported_and_the_block_still_runs(tmp_path, caplog):
    ran = False
    with CpuWakeLatency(0, tmp_path / "absent") as held:
        ran = True
    assert ran and not held.held and "cannot open" in held.problem
    assert "CPU wake latency not held" in caplog.text
    read_only = tmp_path / "ro"
    read_only.write_bytes(b"")
    read_only.chmod(0o400)
    if os.geteuid() == 0:  # root writes anyway: a directory cannot be opened for writing by anyone
        read_only = tmp_path
    with CpuWakeLatency(0, read_only) as held:
        pass
    assert not held.held and held.problem


@pytest.mark.parametrize("bad", [-1, 2**31, 1.5, True, "0"])
def test_bounds_must_be_whole_non_negative_microseconds(bad):
    with pytest.raises(ValueError, match="whole number of microseconds"):
        CpuWakeLatency(bad)


def test_the_kernels_device_takes_the_request_where_this_process_may_write_it():
    if not os.access(DEVICE, os.W_OK):
        pytest.skip(f"{DEVICE} is not writable here (needs root): the fallback is tested above")
    with CpuWakeLatency(0) as held:
        assert held.held, held.problem
