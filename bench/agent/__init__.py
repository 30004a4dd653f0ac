"""`cadence agent-bench`: many live conversations at once through the real agent (pipecat pipeline,
real transport), measured at the listener.

    cli.py        options, `register(subparsers)`, the sweep over N
    agent_proc.py the agent process: the real WebRTC or carrier server, LLM = the paced stand-in
    stand_in.py   the PACED STAND-IN LLM: stamps its first token and each interruption in-band
    callers.py    the simulated callers: aiortc (WebRTC) and the Twilio media-stream protocol
    timeline.py   what the caller heard -> per-turn latency, underruns, barge-in silence
    report.py     p50/p95/p99 per N as JSON, markdown and PNG plots

Clocks: the agent process and the callers run on one machine and stamp with `time.monotonic()`
(CLOCK_MONOTONIC, shared by all processes), so the agent's first-token stamp and the caller's
received audio compare directly.
"""
