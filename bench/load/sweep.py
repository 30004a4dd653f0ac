"""The run: for every rate and seed one open-loop trial (with a fresh server when --model is
given), then per-rate summaries pooled over seeds, capacity, cost and (optionally) WER."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field

from .arrivals import poisson_schedule
from .config import BenchConfig
from .corpus import CharMix
from .driver import TrialOutcome, run_trial
from .http_target import HttpTarget
from .processes import run_shared
from .recognizer import Recognizer, WerResult
from .server_metrics import during, scrape
from .server_proc import ServerProcess
from .summary import (
    RateSummary,
    capacity,
    cost_per_million_chars,
    listeners,
    peak_in_flight,
    server_silence,
    summarize,
    underruns_in_stalls,
)
from .ws_target import WsTarget


@dataclass
class Trial:
    rate: float
    seed: int
    outcome: TrialOutcome
    peak_in_flight_measured: int
    char_mix: CharMix
    wer: WerResult | None = None
    server: dict[str, float] | None = None  # the engine's counters during the trial (server_metrics)


@dataclass
class SweepResult:
    cfg: BenchConfig
    trials: list[Trial] = field(default_factory=list)
    rates: list[RateSummary] = field(default_factory=list)
    capacity: RateSummary | None = None
    cost_per_million_chars: float | None = None  # at capacity, with --gpu-price

    def wer(self) -> WerResult | None:
        """All transcribed requests of the run pooled (None when --wer is off)."""
        scored = [t.wer for t in self.trials if t.wer is not None]
        if not scored:
            return None
        items = [(s["index"], s["reference"], s["hypothesis"]) for w in scored for s in w.samples]
        return WerResult.score(scored[0].model, items)


def ws_url(base: str) -> str:
    scheme, rest = base.rstrip("/").split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/v1/stream"


def make_target(cfg: BenchConfig, base_url: str):
    if cfg.target == "http":
        return HttpTarget(base_url, voice=cfg.voice, language=cfg.language, request_model=cfg.request_model,
                          extra=cfg.extra, sample_rate=cfg.sample_rate, timeout_s=cfg.request_timeout_s)
    return WsTarget(ws_url(base_url), mode=cfg.ws_mode, word_interval_s=cfg.word_interval_s, voice=cfg.voice,
                    language=cfg.language, extra=cfg.extra, sample_rate=cfg.sample_rate,
                    contexts_per_connection=cfg.ws_contexts_per_connection)


def _event_loop_runner() -> asyncio.Runner:
    # uvloop (a uvicorn[standard] dependency) keeps the client's own scheduling jitter small.
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def run_one(cfg: BenchConfig, base_url: str, rate: float, seed: int, *, share: tuple[int, int] | None = None,
            start_wall: float | None = None) -> TrialOutcome:
    """The trial of (rate, seed) from this process; share=(i, n): only requests i mod n, on the
    schedule that counts from the time.time() instant start_wall (processes.py)."""
    schedule = poisson_schedule(rate, cfg.warmup_s, cfg.duration_s, seed)
    wer_indices = {a.index for a in schedule if a.measured}
    wer_indices = set(sorted(wer_indices)[: cfg.wer_requests])
    if share is not None:
        schedule = [a for a in schedule if a.index % share[1] == share[0]]
    prompts = {a.index: cfg.prompt(seed, a.index) for a in schedule}

    async def trial() -> TrialOutcome:
        target = make_target(cfg, base_url)
        start_at = None if start_wall is None else time.perf_counter() + (start_wall - time.time())
        try:
            return await run_trial(target, schedule, prompts, timeout_s=cfg.request_timeout_s,
                                   keep_pcm=wer_indices.__contains__, desc=f"{rate:g} req/s seed {seed}",
                                   start_at=start_at)
        finally:
            await target.close()

    with _event_loop_runner() as runner:
        return runner.run(trial())


def run_sweep(cfg: BenchConfig, log=lambda msg: print(msg, file=sys.stderr), after_rate=None) -> SweepResult:
    """after_rate(result), if given, sees the result after every rate: a long sweep that is cut off
    (a time limit on the GPU machine) keeps the rates it finished."""
    result = SweepResult(cfg)
    recognizer: Recognizer | None = None
    for rate in cfg.rates:
        trials = []
        for seed in cfg.seeds:
            server = ServerProcess(cfg.model, device=cfg.device, extra_args=cfg.serve_args) if cfg.model else None
            with server or contextlib.nullcontext():
                url = server.url if server else cfg.url
                before = scrape(url)
                outcome = (run_one(cfg, url, rate, seed) if cfg.client_processes == 1
                           else run_shared(cfg, url, rate, seed))
                engine = during(before, scrape(url)) if before is not None else None
            measured = [r for r in outcome.records if r.measured]
            trial = Trial(rate, seed, outcome,
                          peak_in_flight(outcome.in_flight, cfg.warmup_s, cfg.warmup_s + cfg.duration_s),
                          CharMix.of([cfg.prompt(seed, r.index) for r in measured]), server=engine)
            if cfg.wer_requests and outcome.kept_pcm:
                # After the trial (and its server) so transcription never competes with the measurement.
                recognizer = recognizer or Recognizer(cfg.wer_model, cfg.wer_device)
                items = [(i, cfg.prompt(seed, i).text, recognizer.transcribe(pcm, sr))
                         for i, (pcm, sr) in sorted(outcome.kept_pcm.items())]
                trial.wer = WerResult.score(recognizer.model_dir, items)
                outcome.kept_pcm.clear()
            trials.append(trial)
        records = [r for t in trials for r in t.outcome.records]
        summary = summarize(rate, list(cfg.seeds), records, cfg.duration_s * len(trials),
                            max(t.peak_in_flight_measured for t in trials),
                            [t.outcome.client_stalls for t in trials],
                            sum(underruns_in_stalls(t.outcome.records, t.outcome.client_stalls) for t in trials),
                            [server_silence(t.outcome.records) for t in trials],
                            [t.server for t in trials if t.server is not None],
                            [listeners(t.outcome.records, cfg.warmup_s, cfg.warmup_s + cfg.duration_s)
                             for t in trials])
        result.trials += trials
        result.rates.append(summary)
        log(_one_line(summary, cfg.slo_s))
        result.capacity = capacity(result.rates, cfg.slo_s)
        if result.capacity is not None and cfg.gpu_price is not None:
            result.cost_per_million_chars = cost_per_million_chars(cfg.gpu_price, result.capacity.chars_per_s)
        if after_rate is not None:
            after_rate(result)
    return result


def _ms(v: float | None) -> str:
    return "-" if v is None else "inf" if v == float("inf") else f"{v * 1e3:.1f}"


def _one_line(s: RateSummary, slo_s: float) -> str:
    t, served = s.audible_ttfa_s, s.served_audible_ttfa_s
    served_text = f" (served: {_ms(served.p50)}/{_ms(served.p95)}/{_ms(served.p99)})" \
        if served is not None and s.ok < s.requests else ""
    return (f"cadence bench: {s.rate:g} req/s: {s.ok}/{s.requests} ok, audible TTFA p50/p95/p99 "
            f"{_ms(t.p50)}/{_ms(t.p95)}/{_ms(t.p99)} ms{served_text}, {s.underrun_requests} underrun requests, "
            f"peak in flight {s.peak_in_flight}, listeners {s.listeners_mean:.0f} (peak {s.listeners_peak}): "
            f"{'holds' if s.sustained(slo_s) else 'does not hold'}")
