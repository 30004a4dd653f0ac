"""PNG plots from the results.json data: audible-TTFA CDF per rate, TTFA percentiles against rate,
requests in flight over time. matplotlib is the optional `bench` extra; without it, no plots."""

from __future__ import annotations

from pathlib import Path


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _finite_ms(values) -> list[float]:
    return [v * 1e3 for v in values if isinstance(v, int | float)]


def write_plots(data: dict, out: Path) -> list[str]:
    """Writes the plots into `out`; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    slo_ms = data["slo_ms"]
    names = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for rate in sorted({t["rate"] for t in data["trials"]}):
        recs = [r for t in data["trials"] if t["rate"] == rate for r in t["records"] if r["measured"]]
        ttfa = sorted(_finite_ms(r["audible_ttfa_s"] for r in recs if r["ok"]))
        if ttfa:  # y is the share of ALL measured requests: failures keep the curve below 1
            ys = [0.0] + [(i + 1) / len(recs) for i in range(len(ttfa))]
            ax.step([ttfa[0], *ttfa], ys, where="post", label=f"{rate:g} req/s")
    ax.axvline(slo_ms, color="grey", linestyle="--", linewidth=1, label=f"{slo_ms:g} ms")
    ax.set(xscale="log", xlabel="audible TTFA (ms)", ylabel="share of requests", ylim=(0, 1.02),
           title="Audible time to first audio, CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    names.append(_save(fig, out, "ttfa_cdf.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    rates = data["rates"]
    never_heard = []  # (rate, key, colour): percentiles that land on failed/silent requests ("inf")
    for key, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^-")):
        pts = [(s["rate"], s["audible_ttfa_s"][key] * 1e3) for s in rates
               if isinstance(s["audible_ttfa_s"][key], int | float)]
        colour = ax.plot(*zip(*pts), style, label=f"{key} audible TTFA")[0].get_color() if pts else "red"
        never_heard += [(s["rate"], key, colour) for s in rates if s["audible_ttfa_s"][key] == "inf"]
    ax.axhline(slo_ms, color="grey", linestyle="--", linewidth=1, label=f"SLO {slo_ms:g} ms")
    ax.set_yscale("log")
    top = ax.get_ylim()[1]
    for rate, key, colour in never_heard:  # drawn at the top edge: "off the chart"
        ax.annotate(f"{key} inf", (rate, top), xytext=(0, -24), textcoords="offset points", ha="center",
                    color=colour, fontsize=8, arrowprops={"arrowstyle": "->", "color": colour})
    for s in rates:
        if not s["sustained"]:
            ax.axvspan(s["rate"] * 0.97, s["rate"] * 1.03, color="red", alpha=0.12)
    ax.set(xlabel="offered load (req/s)", ylabel="ms", title="Audible TTFA vs rate (red: rate fails)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    names.append(_save(fig, out, "ttfa_vs_rate.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for t in data["trials"]:
        times, counts = zip(*t["in_flight"])
        ax.step(times, counts, where="post", linewidth=0.8, label=f"{t['rate']:g} req/s seed {t['seed']}")
    warmup = data["config"]["warmup_s"]
    ax.axvspan(0, warmup, color="grey", alpha=0.12, label="warm-up")
    ax.set(xlabel="seconds since trial start", ylabel="requests in flight", title="Requests in flight")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    names.append(_save(fig, out, "in_flight.png"))
    return names


def _save(fig, out: Path, name: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name
