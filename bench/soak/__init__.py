"""Soak and fault suite: a server under a mix of good and bad clients for minutes, then a verdict.

`python -m bench.soak --checkpoint DIR --minutes 30` starts `cadence serve` on the checkpoint (CPU by
default) and drives it; `--url URL` drives a server already running (give `--pid` and `--log` so its
memory and log are checked too). Clients arrive at `--rate` a second (Poisson); of them 30 % cancel
or vanish mid-stream, 5 % send malformed messages, the rest behave; a few slow readers stay connected
all along. Pass: every well-behaved client received exactly the PCM the server says it sent (no loss,
no duplicate chunk), none had an underrun, RSS (and GPU memory) flat, and no error in the server's log
(every line at ERROR or a traceback is a failure: client faults are logged below that). Beside the
verdict: each underrun client's arrival and the soak's own stalls, and the engine's counters of what
stops it (`engine`: its longest collection and busy iteration, watchdog stalls) from /metrics.
"""
