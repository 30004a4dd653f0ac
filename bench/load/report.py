"""report.md, rendered from the results.json data alone (so it can be re-rendered later)."""

from __future__ import annotations

from collections import Counter

from .server_metrics import device_per_iteration_ms, host_per_iteration_ms
from .summary import cost_per_million_chars

# Send lag above this means the client, not the server, shaped the arrival process: say so.
LAG_WARN_S = 0.010


def _ms(v) -> str:
    if v is None:
        return "-"
    return "inf" if v == "inf" else f"{v * 1e3:.1f}"


def _trio(d: dict) -> str:
    return " / ".join(_ms(d[k]) for k in ("p50", "p95", "p99"))


def _measured(data: dict) -> str:
    """The measured seconds of a trial; per rate when merged runs differ in them (duration_s None)."""
    cfg = data["config"]
    if cfg["duration_s"] is not None:
        return f"{cfg['duration_s']:g} s"
    trials = len(cfg["seeds"])
    return "(" + ", ".join(f"{r['rate']:g} req/s: {r['measured_s'] / trials:g} s" for r in data["rates"]) + ")"


def _char_mix(data: dict) -> str:
    mixes = [t["char_mix"] for t in data["trials"]]
    n = sum(m["requests"] for m in mixes)
    if not n:
        return "no measured requests"
    mean = sum(m["chars_mean"] * m["requests"] for m in mixes) / n
    by: Counter = Counter()
    for m in mixes:
        by.update({int(k): v for k, v in m["by_sentences"].items()})
    parts = ", ".join(f"{k} sentence{'s' * (k > 1)}: {v}" for k, v in sorted(by.items())) if len(by) <= 5 else (
        f"{min(by)}-{max(by)} sentences")  # paragraphs (the long-form mix)
    return (f"{n} measured requests, {mean:.1f} characters on average (min {min(m['chars_min'] for m in mixes)}, "
            f"max {max(m['chars_max'] for m in mixes)}); {parts}")


def render(data: dict, plots: list[str]) -> str:
    cfg = data["config"]
    env = data["environment"]
    server = cfg["url"] or f"fresh `cadence serve --model {cfg['model']} --device {cfg['device']}` per trial"
    target = "HTTP `POST /v1/audio/speech` (pcm, stream_format audio)" if cfg["target"] == "http" else (
        "WebSocket `/v1/stream`, " + ("whole text in one `open`" if cfg["ws_mode"] == "whole" else
                                      f"one word every {cfg['word_interval_s'] * 1e3:g} ms, timed from the first word"))
    lines = [
        "# Cadence bench report", "",
        *([f"**{cfg['label']}**", ""] if cfg["label"] else []),
        f"- created {data['created']}, commit {env['git_commit'] or 'unknown'}",
        *([f"- command: `{' '.join(data['command'])}`"] if "parts" not in data else [
            f"- merged from {len(data['parts'])} runs (`python -m bench.load.merge`):",
            *(f"  - rates {', '.join(f'{r:g}' for r in p['rates'])}: `{' '.join(p['command'])}` ({p['created']})"
              for p in data["parts"])]),
        f"- target: {target}; server: {server}",
        f"- client host: {env['platform']}, {env['cpus']} CPUs, Python {env['python']}; "
        f"GPUs: {', '.join(env['gpus']) or 'none visible'}",
        f"- method: open-loop Poisson arrivals, {cfg['warmup_s']:g} s warm-up + {_measured(data)} measured per "
        f"trial, seeds {', '.join(map(str, cfg['seeds']))}; zero-buffer playout; audible onset = first of two "
        "consecutive 20 ms windows (10 ms hop, DC removed) at >= -45 dBFS; nearest-rank percentiles",
        f"- texts: {_char_mix(data)}", "",
        "## Results", "",
        "Latencies in ms from the request's first byte, p50 / p95 / p99. `inf`: that percentile falls on a request "
        "that failed or was never audible.", "",
        "| req/s | requests | ok | audible TTFA | TTFB | first playable | E2E | RTF p50 / p95 | underrun requests "
        "(events) | stall total / max ms | peak in flight | listeners mean / peak | chars/s | holds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in data["rates"]:
        rtf = s["rtf"]
        rtf_text = "-" if rtf["p50"] is None else f"{rtf['p50']:.2f} / {rtf['p95']:.2f}"
        lines.append(
            f"| {s['rate']:g} | {s['requests']} | {s['ok']} | {_trio(s['audible_ttfa_s'])} | {_trio(s['ttfb_s'])} | "
            f"{_trio(s['first_playable_s'])} | {_trio(s['e2e_s'])} | {rtf_text} | {s['underrun_requests']} "
            f"({s['underrun_events']}) | {s['stall_total_s'] * 1e3:.0f} / {s['stall_max_s'] * 1e3:.0f} | "
            f"{s['peak_in_flight']} | {s.get('listeners_mean', 0):.1f} / {s.get('listeners_peak', 0)} | "
            f"{s['chars_per_s']:.0f} | {'yes' if s['sustained'] else 'no'} |")
    errors = [(s["rate"], s["errors"], s["silent"]) for s in data["rates"] if s["errors"] or s["silent"]]
    if errors:
        lines += ["", "Failures: " + "; ".join(
            f"{r:g} req/s: " + ", ".join([f"{k} x{v}" for k, v in e.items()] + [f"no audible onset x{n}"] * bool(n))
            for r, e, n in errors)]
    refused = [s for s in data["rates"] if s["ok"] < s["requests"] and s.get("served_audible_ttfa_s")]
    if refused:
        lines += ["", "Past capacity, the served requests alone (the refused and failed left out): audible TTFA "
                  + ", ".join(f"{s['rate']:g} req/s {_trio(s['served_audible_ttfa_s'])} ms ({s['ok']} served)"
                              for s in refused) + "."]
    cap = data["capacity_rate"]
    lines += ["", "## Capacity", "",
              f"Highest rate with p95 audible TTFA <= {data['slo_ms']:g} ms, zero underruns and every request "
              f"served and audible: **{f'{cap:g} req/s' if cap is not None else 'none of the rates tried'}**."]
    if data["gpu_price_per_hour"] is not None:
        price = data["gpu_price_per_hour"]
        lines += ["", "## Cost", ""]
        if data["cost_per_million_chars"] is not None:
            lines.append(f"At ${price:g}/h and the throughput measured at capacity: "
                         f"**${data['cost_per_million_chars']:.2f} per million characters**.")
        else:
            lines.append(f"No rate held, so no cost at capacity (${price:g}/h).")
        lines += ["", "| req/s | chars/s | $ per million characters (if the GPU served only this load) |",
                  "|---|---|---|"]
        for s in data["rates"]:
            cost = cost_per_million_chars(price, s["chars_per_s"])
            lines.append(f"| {s['rate']:g} | {s['chars_per_s']:.0f} | {'-' if cost is None else f'{cost:.2f}'} |")
    if data["wer"]:
        w = data["wer"]
        lines += ["", "## Intelligibility", "",
                  f"WER {w['wer'] * 100:.1f}% ({w['errors']} errors / {w['words']} words over {w['utterances']} "
                  f"utterances), faster-whisper `{w['model']}`. Random weights make no speech: WER means "
                  "something only with real weights."]
    lagged = [s for s in data["rates"] if s["send_lag_max_s"] > LAG_WARN_S]
    lines += ["", "## Client health", "",
              "Largest gap between a request's scheduled and actual send: " + ", ".join(
                  f"{s['rate']:g} req/s {s['send_lag_max_s'] * 1e3:.1f} ms" for s in data["rates"]) + "."]
    if lagged:
        lines.append(f"**Warning**: above {LAG_WARN_S * 1e3:g} ms the client fell behind its schedule; "
                     "those rates measured the client as well as the server.")
    if any("client_stall_max_s" in s for s in data["rates"]):
        lines.append("Longest pause of the client's event loop (chunk arrival times are taken there), and the "
                     "underrun events that overlap such a pause (counted above all the same): " + ", ".join(
                         f"{s['rate']:g} req/s {s['client_stall_max_s'] * 1e3:.1f} ms / "
                         f"{s.get('underruns_in_client_stalls', 0)}" for s in data["rates"]) + ".")
    if any("server_silence_max_s" in s for s in data["rates"]):
        lines += ["", "## Server pauses", "",
                  "Longest time in which no request received audio while one was mid-audio (a pause of the "
                  "whole server, e.g. a garbage collection, shows here; one slow stream does not): " + ", ".join(
                      f"{s['rate']:g} req/s {s['server_silence_max_s'] * 1e3:.1f} ms"
                      + (f" at {s['server_silence_at_s']:.2f} s" if s.get("server_silence_at_s") is not None else "")
                      for s in data["rates"]) + "."]
    engine = [(s["rate"], s["server"]) for s in data["rates"] if s.get("server")]
    if engine:
        parts = list(dict.fromkeys(p for _, m in engine for p in host_per_iteration_ms(m) or {}))
        lines += ["", "## The engine during each rate", "",
                  "From the server's own `/metrics` before and after each measured trial (warm-up included): "
                  "its loop's host time per iteration by part, the device's busy time per iteration (CUDA "
                  "events from each step's start to its end), and its garbage-collection pauses.", "",
                  "| rate | iterations | " + " | ".join(f"{p} ms" for p in parts) + " | device ms | longest "
                  "iteration ms (since start) | GC pauses | GC total ms | GC max ms (since start) |",
                  "|---|---|" + "---|" * len(parts) + "---|---|---|---|---|"]
        for rate, m in engine:
            per = host_per_iteration_ms(m) or {}
            lines.append(f"| {rate:g} | {m.get('host_iterations', 0):.0f} | "
                         + " | ".join(f"{per[p]:.2f}" if p in per else "-" for p in parts)
                         + f" | {device_per_iteration_ms(m)}"
                         + f" | {m.get('host_iteration_max_s', 0) * 1e3:.1f}"
                         + f" | {m.get('gc_pauses', 0):.0f} | {m.get('gc_pause_sum_s', 0) * 1e3:.1f}"
                         + f" | {m.get('gc_pause_max_s', 0) * 1e3:.1f} |")
    if plots:
        lines += ["", "## Plots", "", *[f"![{p}]({p})" for p in plots]]
    return "\n".join(lines) + "\n"
