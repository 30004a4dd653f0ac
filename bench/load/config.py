"""The validated settings of one `cadence bench` run (from the command line)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .corpus import Prompt, longest_sentence, paragraph_for, prompt_for


@dataclass(frozen=True)
class BenchConfig:
    out: Path
    url: str | None = None
    model: Path | None = None
    device: str = "cpu"
    serve_args: tuple[str, ...] = ()
    target: str = "http"
    ws_mode: str = "whole"
    word_interval_s: float = 0.010
    ws_contexts_per_connection: int = 4
    rates: tuple[float, ...] = (1.0,)
    seeds: tuple[int, ...] = (0,)
    warmup_s: float = 30.0
    duration_s: float = 300.0
    max_join: int = 3
    text_chars: tuple[int, int] | None = None  # the long-form mix: paragraphs of MIN..MAX characters
    voice: str | None = "ryan"
    language: str | None = "english"
    request_model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    sample_rate: int = 24000
    request_timeout_s: float = 120.0
    slo_s: float = 0.100
    gpu_price: float | None = None
    client_processes: int = 1  # processes sharing each trial's arrivals (processes.py)
    wer_requests: int = 0
    wer_model: str | None = None
    wer_device: str = "cpu"
    label: str = ""
    plots: bool = True

    @staticmethod
    def from_args(a: argparse.Namespace) -> BenchConfig:
        return BenchConfig(
            out=a.out, url=a.url, model=a.model, device=a.device, serve_args=tuple(a.serve_arg), target=a.target,
            ws_mode=a.ws_mode, word_interval_s=a.word_interval_ms / 1000.0,
            ws_contexts_per_connection=a.ws_contexts_per_connection, rates=tuple(a.rates), seeds=tuple(a.seeds),
            warmup_s=a.warmup, duration_s=a.duration, max_join=a.max_join, text_chars=a.text_chars,
            voice=a.voice or None, language=a.language or None, request_model=a.request_model, extra=a.extra,
            sample_rate=a.sample_rate, request_timeout_s=a.request_timeout, slo_s=a.slo_ms / 1000.0,
            gpu_price=a.gpu_price, client_processes=a.client_processes, wer_requests=a.wer, wer_model=a.wer_model,
            wer_device=a.wer_device, label=a.label, plots=not a.no_plots).validate()

    def validate(self) -> BenchConfig:
        longest = longest_sentence()
        checks = [
            (self.warmup_s >= 0, "--warmup must be >= 0"),
            (self.duration_s > 0, "--duration must be > 0"),
            (self.word_interval_s >= 0, "--word-interval-ms must be >= 0"),
            (self.ws_contexts_per_connection >= 1, "--ws-contexts-per-connection must be >= 1"),
            (self.max_join >= 1, "--max-join must be >= 1"),
            (self.text_chars is None or (self.text_chars[0] > 0 and self.text_chars[1] - self.text_chars[0] > longest),
             f"--text-chars MIN,MAX needs 0 < MIN and MAX - MIN > {longest} (the longest sentence)"),
            (self.sample_rate > 0, "--sample-rate must be > 0"),
            (self.request_timeout_s > 0, "--request-timeout must be > 0"),
            (self.slo_s > 0, "--slo-ms must be > 0"),
            (self.gpu_price is None or self.gpu_price > 0, "--gpu-price must be > 0"),
            (self.wer_requests >= 0, "--wer must be >= 0"),
            (1 <= self.client_processes <= 64, "--client-processes must be in 1-64"),
            (self.url is None or self.url.startswith(("http://", "https://")), "--url must start with http(s)://"),
            (self.model is None or self.model.is_dir(), f"model directory {self.model} does not exist"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self

    def prompt(self, seed: int, index: int) -> Prompt:
        """Request `index`'s text in the run's mix."""
        if self.text_chars is not None:
            return paragraph_for(seed, index, *self.text_chars)
        return prompt_for(seed, index, self.max_join)

    @property
    def target_label(self) -> str:
        return f"ws ({self.ws_mode})" if self.target == "ws" else "http"

    def as_dict(self) -> dict:
        d = asdict(self)
        return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}
