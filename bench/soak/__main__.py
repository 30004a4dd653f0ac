"""`python -m bench.soak`: see bench/soak/__init__.py."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.loop_lag import LoopLag

from . import clients
from .server import StartedServer, engine_counters, gpu_used_mib, log_faults, rss_bytes

# Of the arrivals: behaviour -> share (the rest, 65 %, behave well).
MIX = {"ws_cancel": 0.15, "ws_vanish": 0.10, "http_vanish": 0.05, "ws_malformed": 0.03, "http_malformed": 0.02}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server (http://host:port)")
    where.add_argument("--checkpoint", type=Path, help="start `cadence serve` on this checkpoint")
    p.add_argument("--device", default="cpu", help="with --checkpoint (default cpu)")
    p.add_argument("--serve-arg", action="append", default=[], help="one more `cadence serve` argument")
    p.add_argument("--pid", type=int, help="with --url: the server's process, for its RSS")
    p.add_argument("--log", type=Path, help="with --url: the server's log, checked for errors")
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--rate", type=float, default=1.0, help="client arrivals a second (Poisson)")
    p.add_argument("--prebuffer-ms", type=float, default=0.0,
                   help="well-behaved clients start playing this long after their first audio (0: at once)")
    p.add_argument("--slow-readers", type=int, default=2)
    p.add_argument("--api-key", help="sent as Authorization: Bearer on every request")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rss-growth-mib", type=float, default=64.0,
                   help="largest RSS growth from the first quarter of the run to its end that passes")
    p.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = p.parse_args(argv)
    if not args.minutes > 0 or not args.rate > 0:
        raise SystemExit("--minutes and --rate must be > 0")
    return args


def auth_headers(args) -> dict[str, str]:
    return {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}


STALL_PROBE_S = 0.05
STALL_S = 0.2  # a hold-up of this process's event loop worth reporting


async def drive(url: str, args, pid: int | None) -> dict:
    rng = random.Random(args.seed)
    headers = auth_headers(args)
    ws_url = url.replace("http", "ws", 1) + "/v1/stream"
    stop = asyncio.Event()
    outcomes: list[clients.Outcome] = []
    crashed: Counter[str] = Counter()
    memory: list[tuple[float, int | None, int | None]] = []
    start = time.monotonic()
    end = start + args.minutes * 60

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=1000)) as http:
        async def one(kind: str, coro) -> None:
            began = time.monotonic() - start
            try:
                outcome = await coro
            except Exception as e:  # a client that could not finish its behaviour
                crashed[kind] += 1
                outcome = clients.Outcome(kind, ok=kind in ("ws_vanish", "http_vanish"),
                                          problem=f"{type(e).__name__}: {e}"[:200])
            outcome.extra["began_s"] = round(began, 1)
            outcome.extra["ended_s"] = round(time.monotonic() - start, 1)
            outcomes.append(outcome)

        def make(kind: str, r: random.Random):
            pre = args.prebuffer_ms / 1e3
            return {"ws_good": lambda: clients.ws_good(ws_url, headers, r, pre),
                    "sse_good": lambda: clients.sse_good(url, headers, http, r, pre),
                    "ws_cancel": lambda: clients.ws_cancel(ws_url, headers, r),
                    "ws_vanish": lambda: clients.ws_vanish(ws_url, headers, r),
                    "http_vanish": lambda: clients.http_vanish(url, headers, http, r),
                    "ws_malformed": lambda: clients.ws_malformed(ws_url, headers, r),
                    "http_malformed": lambda: clients.http_malformed(url, headers, http, r)}[kind]()

        async def sample_memory() -> None:
            while not stop.is_set():
                memory.append((time.monotonic() - start, rss_bytes(pid), gpu_used_mib()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 5.0)

        sampler = asyncio.create_task(sample_memory())
        # This process's own stalls: a chunk read late here looks like an underrun that the server did not
        # cause (the clients share the machine with the server).
        own_loop = LoopLag(STALL_PROBE_S)
        watcher = own_loop.start()
        slow = [asyncio.create_task(one("slow_reader", clients.slow_reader(ws_url, headers, stop,
                                                                             random.Random(args.seed + i))))
                for i in range(args.slow_readers)]
        tasks = []
        while time.monotonic() < end:
            await asyncio.sleep(rng.expovariate(args.rate))
            roll, kind = rng.random(), None
            for name, share in MIX.items():
                roll -= share
                if roll < 0:
                    kind = name
                    break
            kind = kind or rng.choice(["ws_good", "sse_good"])
            tasks.append(asyncio.create_task(one(kind, make(kind, random.Random(rng.random())))))
        await asyncio.gather(*tasks)
        stop.set()
        await asyncio.gather(*slow, sampler)
        watcher.cancel()
        memory.append((time.monotonic() - start, rss_bytes(pid), gpu_used_mib()))
    # (when, how long) this process's event loop was held up, in seconds from the start
    stalls = [(round(at_ms / 1e3 - start, 1), round(lag_ms / 1e3, 3)) for at_ms, lag_ms in own_loop.lags
              if lag_ms >= STALL_S * 1e3]
    return {"outcomes": outcomes, "crashed": crashed, "memory": memory, "stalls": stalls,
            "seconds": time.monotonic() - start}


def _underrun_record(o: clients.Outcome, outcomes: list[clients.Outcome], stalls: list[tuple[float, float]]) -> dict:
    """A client that underran: when it came, what it heard, the arrivals just before it, this process's own
    longest stall while it played."""
    began, ended = o.extra["began_s"], o.extra["ended_s"]
    return {"kind": o.kind, "began_s": began, "underruns": o.underruns,
            "audio_s": round(o.received_samples / clients.SAMPLE_RATE, 1),
            "ttfa_ms": None if o.ttfa_s is None else round(o.ttfa_s * 1e3, 1),
            "arrivals_in_10_s_before": sum(0 <= began - p.extra["began_s"] <= 10 for p in outcomes if p is not o),
            "own_stall_s_meanwhile": max((lag for at, lag in stalls if began - 1 <= at <= ended), default=0.0)}


def verdict(run: dict, args, log_errors: list[str]) -> dict:
    outcomes: list[clients.Outcome] = run["outcomes"]
    good = [o for o in outcomes if o.kind in ("ws_good", "sse_good")]
    mem = [(t, rss) for t, rss, _ in run["memory"] if rss is not None]
    gpu = [g for _, _, g in run["memory"] if g is not None]
    quarter = [rss for t, rss in mem if t >= run["seconds"] / 4] or [rss for _, rss in mem]
    rss_growth_mib = (mem[-1][1] - quarter[0]) / 2**20 if mem else None
    ttfa = sorted(o.ttfa_s for o in good if o.ttfa_s is not None)
    summary = {
        "seconds": round(run["seconds"], 1), "rate": args.rate, "prebuffer_ms": args.prebuffer_ms,
        "clients": len(outcomes),
        "by_kind": dict(Counter(o.kind for o in outcomes)),
        "failed_by_kind": dict(Counter(o.kind for o in outcomes if not o.ok)),
        "well_behaved": len(good),
        "lost_samples": sum(abs(o.lost) for o in good), "clients_with_loss": sum(o.lost != 0 for o in good),
        "duplicate_chunks": sum(o.duplicates for o in good),
        "underruns": sum(o.underruns for o in good), "clients_with_underruns": sum(o.underruns > 0 for o in good),
        "ttfa_p50_ms": round(ttfa[len(ttfa) // 2] * 1e3, 1) if ttfa else None,
        "ttfa_p95_ms": round(ttfa[int(len(ttfa) * 0.95)] * 1e3, 1) if ttfa else None,
        "rss_start_mib": round(mem[0][1] / 2**20, 1) if mem else None,
        "rss_quarter_mib": round(quarter[0] / 2**20, 1) if mem else None,
        "rss_end_mib": round(mem[-1][1] / 2**20, 1) if mem else None,
        "gpu_start_mib": gpu[0] if gpu else None, "gpu_end_mib": gpu[-1] if gpu else None,
        "server_log_errors": log_errors[:20],
        "problems": [f"{o.kind}: {o.problem}" for o in outcomes if not o.ok][:20],
        "own_stalls": sorted(run["stalls"], key=lambda s: -s[1])[:20],  # (at s, lag s), the longest first
        # when they came and what they heard: underruns in a burst of arrivals point at capacity
        "underrun_clients": [_underrun_record(o, outcomes, run["stalls"]) for o in good if o.underruns][:20],
    }
    checks = {
        "no_lost_or_duplicated_audio": summary["lost_samples"] == 0 and summary["duplicate_chunks"] == 0,
        "every_well_behaved_client_finished": all(o.ok and o.sent_samples is not None for o in good),
        "zero_underruns": summary["underruns"] == 0,
        "rss_flat": rss_growth_mib is None or rss_growth_mib <= args.rss_growth_mib,
        "gpu_memory_flat": len(gpu) < 2 or gpu[-1] - gpu[len(gpu) // 4] <= 256,
        "no_server_errors_in_log": not log_errors,
        "misbehaving_clients_handled": all(o.ok for o in outcomes if o.kind in ("ws_cancel", "ws_malformed",
                                                                                  "http_malformed")),
    }
    summary["checks"] = checks
    summary["pass"] = all(checks.values())
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = None
    log = args.log
    offset = log.stat().st_size if log is not None and log.exists() else 0
    if args.checkpoint is not None:
        log = Path(tempfile.mkdtemp(prefix="soak-")) / "serve.log"
        started = StartedServer(args.checkpoint, args.device, log, args.serve_arg)
        url, pid = started.url, started.pid
    else:
        url, pid = args.url.rstrip("/"), args.pid
    print(f"soak: {args.minutes:g} min at {args.rate:g} clients/s against {url}", file=sys.stderr)
    try:
        run = asyncio.run(drive(url, args, pid))
        engine = engine_counters(url, auth_headers(args))
    finally:
        code = started.stop() if started is not None else None
    faults = log_faults(log, offset)
    summary = verdict(run, args, faults)
    summary["engine"] = engine
    if started is not None:
        summary["server_exit_status"] = code
        summary["checks"]["server_exits_0"] = code == 0
        summary["pass"] = all(summary["checks"].values())
        summary["server_log"] = str(log)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
