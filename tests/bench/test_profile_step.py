"""bench.profile_step's accounting of overlapping kernels (CPU: the profiler's part needs CUDA)."""

from bench.profile_step import ordered, summary


def test_increments_add_up_to_the_span_when_kernels_overlap():
    # a [0, 10]; b starts early (PDL) and ends at 14; c lies inside b; d after a gap
    spans = [("b", 5.0, 14.0), ("a", 0.0, 10.0), ("c", 6.0, 9.0), ("d", 20.0, 23.0)]
    ks = ordered(spans)
    assert [k["name"] for k in ks] == ["a", "b", "c", "d"]
    assert [k["increment_us"] for k in ks] == [10.0, 4.0, 0.0, 9.0]
    assert [k["us"] for k in ks] == [10.0, 9.0, 3.0, 3.0]
    s = summary(ks)
    assert s["span_us"] == 23.0 and s["duration_sum_us"] == 25.0
    assert sum(r["increment_sum_us"] for r in s["by_name"]) == 23.0
    assert s["by_name"][0]["name"] == "a"  # the largest increment first


def test_no_kernels():
    assert ordered([]) == [] and summary([])["kernels"] == 0
