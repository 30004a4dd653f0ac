"""The router's inputs without Ray: headroom read from a real Admission (it must agree with try_admit),
the ranking, and the summed metrics."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from tts_engine.cluster.headroom import headroom, rank_key
from tts_engine.cluster.metrics import merge
from tts_engine.scheduler.admission import Admission


def engine_with(adm: Admission, ready: bool = True):
    """The engine attributes headroom() reads, around a real Admission."""
    return SimpleNamespace(ready=ready, alive=ready, scheduler=SimpleNamespace(admission=adm))


def test_headroom_agrees_with_admission_at_every_fill_level():
    adm = Admission(max_active=3, max_queued=1, reject_predicted_underrun=True)
    adm.publish_capacity(2)  # the cost model says real time holds for 2 decoding streams
    engine = engine_with(adm)
    for _ in range(4):
        room = headroom(engine)
        with adm.lock:
            decision = adm.try_admit()
        assert room["admits"] == decision.admitted
        if not decision.admitted:
            break
        assert room["free"] >= 1
    assert adm.admitted == 2 and headroom(engine)["free"] == 0


def test_headroom_of_an_engine_not_ready_is_none():
    room = headroom(engine_with(Admission(4, 0, False), ready=False))
    assert room["free"] == 0 and not room["admits"] and not room["ready"]


def test_rank_prefers_admitting_then_free_then_fewest_streams():
    full = {"admits": False, "free": 0, "admitted": 0}
    roomy = {"admits": True, "free": 5, "admitted": 9}
    tight = {"admits": True, "free": 1, "admitted": 1}
    twin = {"admits": True, "free": 1, "admitted": 3}
    assert sorted([full, twin, tight, roomy], key=rank_key) == [roomy, tight, twin, full]
    # five streams sent to `roomy` since its reading: `tight` is now the better one
    assert rank_key(roomy, routed_since=5) > rank_key(tight)


def test_metrics_merge_labels_each_replica_and_sums():
    a = "# TYPE cadence_rejections counter\ncadence_rejections_total{code=\"overloaded\"} 2.0\n"
    b = "# TYPE cadence_rejections counter\ncadence_rejections_total{code=\"overloaded\"} 3.0\n"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(merge({"r1": a, "r2": b})) for s in fam.samples}
    assert samples[("cadence_rejections_total", (("code", "overloaded"), ("replica", "r1")))] == 2.0
    assert samples[("cadence_rejections_total", (("code", "overloaded"), ("replica", "r2")))] == 3.0
    assert samples[("cadence_rejections_total", (("code", "overloaded"),))] == 5.0
