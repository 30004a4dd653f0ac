"""/metrics for the cluster: each replica pushes its own Prometheus text (the single server's metrics,
unchanged) every PUSH_EVERY_S; `GET /metrics` on the Serve address then answers every series twice:
per replica with a `replica` label, and summed over the replicas without it. A replica silent for
STALE_S (dead, or replaced) drops out of both."""

from __future__ import annotations

import time
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

PUSH_EVERY_S = 1.0
STALE_S = 5.0


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    esc = {k: v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for k, v in labels.items()}
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(esc.items())) + "}"


def merge(texts: dict[str, str]) -> str:
    """Prometheus texts by replica name -> one text: every sample per replica, then the sums."""
    families: dict[str, tuple[str, str]] = {}  # name -> (type, help)
    per_replica: dict[str, list[str]] = defaultdict(list)
    sums: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    for replica, text in sorted(texts.items()):
        for fam in text_string_to_metric_families(text):
            families.setdefault(fam.name, (fam.type, fam.documentation))
            for s in fam.samples:
                per_replica[fam.name].append(f"{s.name}{_labels({**s.labels, 'replica': replica})} {s.value!r}")
                sums[fam.name][(s.name, tuple(sorted(s.labels.items())))] += s.value
    out = []
    for name, (kind, doc) in families.items():
        out += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", *per_replica[name]]
        out += [f"{sample}{_labels(dict(labels))} {value!r}" for (sample, labels), value in sums[name].items()]
    return "\n".join(out) + "\n"


class Board:
    """The latest text of each replica, with its arrival time."""

    def __init__(self) -> None:
        self._texts: dict[str, tuple[float, str]] = {}

    def report(self, replica: str, text: str) -> None:
        self._texts[replica] = (time.monotonic(), text)

    def render(self) -> str:
        now = time.monotonic()
        self._texts = {r: (t, x) for r, (t, x) in self._texts.items() if now - t < STALE_S}
        return merge({r: x for r, (_, x) in self._texts.items()})
