"""The chips table and a step's time on a chip (issue 36, items 4 and its bad input):
``step_time(cost, mesh_sizes, chip, links)`` as a pure function of a ``StepCost`` built by hand,
the links mesh axes run over (given, or by default), and every bad input's message."""

import math

import pytest

from shardtypes.tools import chips
from shardtypes.tools.step_cost import Collective, Communication, StepCost

GIB = 2**30


def cost(flops=None, memory=0, collectives=(), lower_bound=()):
    communication = Communication(tuple(collectives), lower_bound)
    flops = dict(flops or {})
    return StepCost(communication, sum(flops.values()), flops, memory, lower_bound)


# ---------------------------------------------------------------------------------------------
# The table


def test_every_chip_has_its_figures_and_their_sources():
    for name in chips.known_chips():
        chip = chips.chip_named(name)
        assert chip.hbm_bytes > 0 and chip.hbm_bandwidth > 0 and chip.domain >= 8
        assert chip.flops["bf16"] > 0 and chip.float32_as in chip.flops
        assert chip.fast in chip.links and chip.slow in chip.links
        assert chip.sources and all(s.startswith("https://") for s in chip.sources)
    # the names issue 36 asks for, and the memory-only names --hbm took before
    for name in ("h100", "h200", "a100", "tpu-v5e", "tpu-v5p", "tpu-v6e", "a100-40gb", "a100-80gb", "tpu-v4"):
        assert name in chips.known_chips()


def test_published_figures():
    h100, a100, v5p = chips.chip_named("h100"), chips.chip_named("a100"), chips.chip_named("tpu-v5p")
    assert h100.flops["bf16"] == 989.5e12 and h100.flops["fp8"] == 1979e12 and h100.hbm_bandwidth == 3.35e12
    assert h100.links == {"nvlink": 450e9, "network": 50e9} and h100.domain == 8
    assert chips.chip_named("h200").hbm_bandwidth == 4.8e12 and chips.chip_named("h200").hbm_bytes == 141 * GIB
    assert a100.name == "a100-80gb" and a100.flops["bf16"] == 312e12 and a100.links["nvlink"] == 300e9
    assert "fp8" not in a100.flops
    assert v5p.flops["bf16"] == 459e12 and v5p.links == {"ici": 600e9, "dcn": 6.25e9}
    assert chips.chip_named("tpu-v5e").links == {"ici": 200e9, "dcn": 3.125e9}
    assert chips.chip_named("tpu-v6e").links["ici"] == 400e9


def test_the_memory_table_is_the_chips_table():
    from shardtypes.tools import html_parts

    for name in chips.known_chips():
        assert html_parts.parse_capacity(name)[0] == chips.chip_named(name).hbm_bytes
    assert html_parts.DEVICE_KINDS is chips.DEVICE_KINDS


def test_rates_by_dtype():
    h100, a100, v5e = (chips.chip_named(n) for n in ("h100", "a100", "tpu-v5e"))
    assert h100.rate("bfloat16")[:2] == (989.5e12, "bf16")
    assert h100.rate("float32")[:2] == (494.5e12, "tf32")  # JAX's default precision: TF32
    assert v5e.rate("float32")[:2] == (197e12, "bf16")  # one bf16 pass on TPU
    assert h100.rate("float8_e4m3fn")[:2] == (1979e12, "fp8")
    rate, cls, note = a100.rate("float8_e5m2")
    assert (rate, cls) == (312e12, "bf16") and note == ("float8_e5m2 counted at a100-80gb's bf16 rate "
                                                       "(312 TFLOP/s): it publishes no fp8 rate")
    rate, cls, note = h100.rate("float64")
    assert (rate, cls) == (67e12, "fp32") and "publishes no rate for float64" in note


@pytest.mark.parametrize("name", ["H100", " tpu-v5p ", "A100"])
def test_names_are_case_and_space_blind(name):
    assert chips.chip_named(name).name in chips.CHIPS


def test_unknown_chip_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"^verify\(chip=\.\.\.\): 'h1000' is not a known chip \(did you mean "
                                         r"'h100'\?\); known chips: h100, h200, a100, a100-40gb, a100-80gb, tpu-v4, "
                                         r"tpu-v5e, tpu-v5p, tpu-v6e$"):
        chips.chip_named("h1000", "verify(chip=...)")
    with pytest.raises(ValueError, match=r"^--chip: 'gaudi' is not a known chip; known chips: h100"):
        chips.chip_named("gaudi", "--chip")
    with pytest.raises(TypeError, match=r"^chip: expected a chip name \(h100, .*\), got int 100$"):
        chips.chip_named(100)


# ---------------------------------------------------------------------------------------------
# Bandwidths


@pytest.mark.parametrize("text, rate", [
    ("50GB/s", 50e9), ("400Gb/s", 50e9), ("400Gbps", 50e9), ("1.2 TB/s", 1.2e12), ("900 GBps", 900e9),
    ("1GiB/s", 2**30), (".5 TB/s", 0.5e12), ("100 MB / s", 100e6), (450e9, 450e9), (25_000_000_000, 25e9)])
def test_bandwidths_parse(text, rate):
    assert chips.parse_bandwidth(text) == pytest.approx(rate)


@pytest.mark.parametrize("bad", ["50", "50GB", "fast", "GB/s", "5 0GB/s", "50XB/s", "-5GB/s"])
def test_bandwidth_that_does_not_parse(bad):
    with pytest.raises(ValueError, match=rf"^--links: {bad!r} is not a bandwidth; write a number and a unit per "
                                         r"second, as 50GB/s, 400Gb/s or 400Gbps"):
        chips.parse_bandwidth(bad, "--links")


@pytest.mark.parametrize("bad", ["0GB/s", 0, -1.0, float("inf"), float("nan")])
def test_bandwidth_must_be_positive(bad):
    with pytest.raises(ValueError, match=r"^links: a bandwidth must be positive and finite, got"):
        chips.parse_bandwidth(bad)


@pytest.mark.parametrize("bad", [True, None, [50]])
def test_bandwidth_of_the_wrong_type(bad):
    with pytest.raises(TypeError, match=r"^links\['d'\]: expected a bandwidth such as '50GB/s' or '400Gb/s', got"):
        chips.parse_bandwidth(bad, "links['d']")


# ---------------------------------------------------------------------------------------------
# Which link each mesh axis runs over


def names(links):
    return {a: link.name for a, link in links.items()}


def test_default_links_on_gpus_fill_a_node_with_the_trailing_axes():
    assert names(chips.axis_links({"d": 64, "t": 8}, "h100")) == {"d": "network", "t": "nvlink"}
    assert names(chips.axis_links({"d": 2, "t": 4}, "h100")) == {"d": "nvlink", "t": "nvlink"}
    assert names(chips.axis_links({"d": 4, "t": 4}, "h100")) == {"d": "network", "t": "nvlink"}
    # 64 devices of t do not fit in a node: both over the network
    assert names(chips.axis_links({"d": 64, "t": 64}, "h100")) == {"d": "network", "t": "network"}
    assert names(chips.axis_links({"p": 16, "d": 2, "t": 4, "one": 1}, "a100")) == {
        "p": "network", "d": "nvlink", "t": "nvlink", "one": "nvlink"}


def test_default_links_on_tpus_fill_a_slice():
    assert names(chips.axis_links({"d": 64, "t": 64}, "tpu-v5e")) == {"d": "dcn", "t": "ici"}
    assert names(chips.axis_links({"d": 64, "t": 64}, "tpu-v5p")) == {"d": "ici", "t": "ici"}
    assert names(chips.axis_links({"slice": 4, "d": 16, "t": 16}, "tpu-v6e")) == {"slice": "dcn", "d": "ici", "t": "ici"}


def test_links_given_by_name_or_bandwidth():
    links = chips.axis_links({"d": 64, "t": 64}, "h100", {"t": "NVLink", "d": "25GB/s"})
    assert links["t"] == chips.Link("nvlink", 450e9) and links["d"] == chips.Link("25GB/s", 25e9)
    assert str(links["t"]) == "nvlink, 450 GB/s" and str(links["d"]) == "25GB/s, 25 GB/s"
    assert chips.axis_links({"d": 8}, "tpu-v5e", {"d": 1e11})["d"] == chips.Link("100 GB/s", 1e11)
    # an axis of one device sends nothing: it may be left out
    assert chips.axis_links({"d": 8, "one": 1}, "h100", {"d": "nvlink"})["d"].name == "nvlink"


def test_an_axis_mapped_to_no_link():
    with pytest.raises(ValueError, match=r"^verify\(links=\.\.\.\): mesh axis 'd' \(64 devices\) is mapped to no "
                                         r"link; give every mesh axis one of h100's links \(nvlink, network\) or a "
                                         r"bandwidth such as '50GB/s', e\.g\. \{'d': 'network', 't': 'nvlink'\}$"):
        chips.axis_links({"d": 64, "t": 8}, "h100", {"t": "nvlink"}, links_option="verify(links=...)")


def test_a_link_naming_an_axis_not_in_the_mesh():
    with pytest.raises(ValueError, match=r"^--links: 'tt' is not a mesh axis \(did you mean 't'\?\); the mesh's "
                                         r"axes are d, t$"):
        chips.axis_links({"d": 64, "t": 8}, "h100", {"d": "network", "t": "nvlink", "tt": "nvlink"},
                         links_option="--links")


def test_a_link_the_chip_does_not_have():
    with pytest.raises(ValueError, match=r"^links\['t'\]: 'ici' is neither one of h100's links \(nvlink, network\) "
                                         r"nor a bandwidth such as '50GB/s'$"):
        chips.axis_links({"d": 64, "t": 8}, "h100", {"d": "network", "t": "ici"})
    with pytest.raises(ValueError, match=r"^links\['d'\]: '50 gigs' is not a bandwidth"):
        chips.axis_links({"d": 64}, "h100", {"d": "50 gigs"})
    with pytest.raises(TypeError, match=r"^links: expected a mapping of mesh axis to a link \(nvlink, network\)"):
        chips.axis_links({"d": 64}, "h100", ["nvlink"])


def test_a_chip_without_a_published_link_asks_for_a_bandwidth():
    with pytest.raises(ValueError, match=r"^--chip: tpu-v4 publishes no ici bandwidth, the link mesh axis 'd' runs "
                                         r"over by default; give --links bandwidths, e\.g\. "
                                         r"d=50GB/s,t=50GB/s$"):
        chips.axis_links({"d": 8, "t": 8}, "tpu-v4", chip_option="--chip", links_option="--links")
    with pytest.raises(ValueError, match=r"^links\['d'\]: tpu-v4 publishes no dcn bandwidth"):
        chips.axis_links({"d": 8}, "tpu-v4", {"d": "dcn"})
    assert chips.axis_links({"d": 8}, "tpu-v4", {"d": "100GB/s"})["d"].bytes_per_second == 1e11


# ---------------------------------------------------------------------------------------------
# The step's time


def test_compute_memory_and_communication_seconds():
    gathers = Collective("all-gather", ("d",), 2 * GIB, 80, "model.py:42 (mlp)")
    reduce = Collective("all-reduce", ("t",), GIB // 2, 80, "model.py:50 (mlp)")
    step = cost({"bfloat16": 989.5e12 * 0.010, "float32": 494.5e12 * 0.002}, memory=int(3.35e12 * 0.004),
                collectives=[gathers, reduce])
    t = chips.step_time(step, {"d": 64, "t": 8}, "h100")
    assert t.chip == "h100"
    assert t.compute == pytest.approx(0.012)
    assert t.memory == pytest.approx(0.004)
    assert t.communication == {("d",): pytest.approx(160 * GIB / 50e9), ("t",): pytest.approx(40 * GIB / 450e9)}
    assert t.no_overlap == pytest.approx(0.016 + 160 * GIB / 50e9 + 40 * GIB / 450e9)
    assert t.perfect_overlap == pytest.approx(160 * GIB / 50e9)
    assert t.bound.kind is chips.Bound.COMMUNICATION and t.bound.axes == ("d",) and t.bound.amount == 160 * GIB
    assert t.bound.collective == "all-gather" and t.bound.where == "model.py:42 (mlp)" and t.bound.share is None
    assert t.bound.seconds == t.perfect_overlap and t.bound.total == pytest.approx(t.no_overlap)
    assert str(t.bound) == ("communication over 'd' (network, 50 GB/s): the all-gathers, 160 GiB sent per device, most "
                       f"from model.py:42 (mlp), {chips.fmt_seconds(160 * GIB / 50e9)} of "
                       f"{chips.fmt_seconds(t.no_overlap)}")
    assert t.assumptions == ()
    assert t.communication_by_axis == {"d": t.communication[("d",)], "t": t.communication[("t",)]}


def test_a_group_of_axes_runs_at_its_slowest_link():
    step = cost(collectives=[Collective("all-reduce", ("d", "t"), 10**9, 1),
                             Collective("all-gather", ("d", "t"), 3 * 10**9, 1)])
    t = chips.step_time(step, {"d": 4, "t": 8}, "h100", {"d": "network", "t": "nvlink"})
    assert t.communication == {("d", "t"): pytest.approx(4e9 / 50e9)}
    assert str(t.bound).startswith("communication over 'd' x 't' (network, 50 GB/s): the all-gathers, 75% of 3.73 GiB")
    assert t.bound.link == chips.Link("network", 50e9) and t.bound.share == pytest.approx(0.75)
    faster = chips.step_time(step, {"d": 4, "t": 8}, "h100", {"d": "400GB/s", "t": "nvlink"})
    assert faster.communication == {("d", "t"): pytest.approx(4e9 / 400e9)}


def test_compute_bound_step_names_its_dtype():
    step = cost({"bfloat16": 9e15, "float32": 1e14}, memory=10**9)
    t = chips.step_time(step, {"d": 8}, "tpu-v5p")
    assert t.compute == pytest.approx(9e15 / 459e12 + 1e14 / 459e12)
    assert t.bound.kind is chips.Bound.COMPUTE and (t.bound.dtype, t.bound.rate_class) == ("bfloat16", "bf16")
    assert str(t.bound) == (f"compute: 9.1 PFLOP per device (99% of them bfloat16) at tpu-v5p's bf16 peak of 459 TFLOP/s, "
                       f"{chips.fmt_seconds(t.compute)} of {chips.fmt_seconds(t.no_overlap)}")
    assert t.perfect_overlap == t.compute and t.communication == {}


def test_memory_bound_step():
    t = chips.step_time(cost({"float32": 10**9}, memory=819 * 10**9), {"d": 4}, "tpu-v5e")
    assert t.memory == pytest.approx(1.0)
    assert t.bound.kind is chips.Bound.MEMORY and t.bound.amount == 819 * 10**9 and t.bound.rate == 819e9
    assert str(t.bound) == f"memory: 763 GiB read and written per device at 819 GB/s, 1 s of {chips.fmt_seconds(t.no_overlap)}"


def test_stand_in_rates_and_lower_bounds_are_said():
    step = cost({"float8_e4m3fn": 312e12, "float64": 19.5e12},
                lower_bound=("a while loop's body (its trip count is not known from the jaxpr) is counted once",))
    t = chips.step_time(step, {"d": 8}, "a100")
    assert t.compute == pytest.approx(2.0)
    assert t.assumptions == (
        "float8_e4m3fn counted at a100-80gb's bf16 rate (312 TFLOP/s): it publishes no fp8 rate",
        "float64 counted at a100-80gb's fp32 rate (19.5 TFLOP/s): it publishes no rate for float64",
        "a lower bound: a while loop's body (its trip count is not known from the jaxpr) is counted once")


def test_a_free_step_and_an_empty_mesh():
    t = chips.step_time(cost(), {"d": 8}, "h100")
    assert t.no_overlap == 0 == t.perfect_overlap and t.bound == chips.StepBound(chips.Bound.NOTHING)
    assert str(t.bound) == "nothing: the step is free"
    assert str(t).startswith("0 s to 0 s per step on h100")


def test_bytes_over_an_axis_the_mesh_lacks():
    with pytest.raises(ValueError, match=r"^step_time: the step sends bytes over mesh axis 'x', which the mesh"):
        chips.step_time(cost(collectives=[Collective("all-reduce", ("x",), 10, 1)]), {"d": 8}, "h100")


def test_bad_chip_and_links_reach_step_time_with_their_option():
    with pytest.raises(ValueError, match=r"^--chip: 'h10' is not a known chip"):
        chips.step_time(cost(), {"d": 8}, "h10", chip_option="--chip")
    with pytest.raises(ValueError, match=r"^--links: mesh axis 'd' \(8 devices\) is mapped to no link"):
        chips.step_time(cost(), {"d": 8}, "h100", {}, links_option="--links")


@pytest.mark.parametrize("bad", [None, {"flops_by_dtype": {}}, 3.5])
def test_step_time_takes_a_step_cost(bad):
    with pytest.raises(TypeError, match=r"^step_time: cost must be a StepCost \(verify's report\.cost\), got "):
        chips.step_time(bad, {"d": 8}, "h100")


def test_a_bound_is_its_kind_and_its_figures():
    with pytest.raises(TypeError, match=r"^StepBound: kind must be a Bound \(COMPUTE, MEMORY, COMMUNICATION, "
                                        r"NOTHING\), got str 'compute'$"):
        chips.StepBound("compute")
    with pytest.raises(TypeError, match=r"^StepBound: seconds must be a number of seconds >= 0, got int -1$"):
        chips.StepBound(chips.Bound.MEMORY, -1)
    with pytest.raises(TypeError, match=r"^StepBound: share must be a number from 0 to 1, got float 1.5$"):
        chips.StepBound(chips.Bound.COMPUTE, 1.0, 2.0, share=1.5)
    with pytest.raises(TypeError, match=r"^StepBound: link must be a Link or None, got str$"):
        chips.StepBound(chips.Bound.COMMUNICATION, link="nvlink")
    with pytest.raises(TypeError, match=r"^StepTime: bound must be a StepBound, got str 'compute: 1 s'$"):
        chips.StepTime("h100", 1.0, 0.0, {}, {}, "compute: 1 s")
    # a bound made by hand says what one made by step_time would
    bound = chips.StepBound(chips.Bound.COMMUNICATION, 2.0, 3.0, 100 * GIB, 50e9, axes=("d",),
                            link=chips.Link("network", 50e9))
    assert str(bound) == "communication over 'd' (network, 50 GB/s): 100 GiB sent per device, 2 s of 3 s"
    assert [b.value for b in chips.Bound] == ["compute", "memory", "communication", "nothing"]


def test_text_and_dict():
    step = cost({"bfloat16": 989.5e12 * 0.05}, memory=10**9,
                collectives=[Collective("all-gather", ("d",), 10**9, 2, "m.py:1 (f)")])
    t = chips.step_time(step, {"d": 64, "t": 8}, "h100")
    text = str(t)
    assert text.startswith("50 ms to 90.3 ms per step on h100 (perfect overlap to none): compute 50 ms, memory ")
    assert "communication 'd' 40 ms; bound by compute" in text
    d = t.to_dict()
    assert d["communication"] == [{"axes": ["d"], "seconds": pytest.approx(0.04)}]
    assert d["links"]["t"] == {"link": "nvlink", "bytes_per_second": 450e9}
    assert math.isclose(d["no_overlap"], t.no_overlap) and d["bound"] == str(t.bound)
    assert d["bound_kind"] == "compute" == t.bound.kind.value


def test_formats():
    assert [chips.fmt_seconds(s) for s in (0, 2.5e-7, 8.3e-4, 0.062, 1.25, 4000)] == [
        "0 s", "250 ns", "830 µs", "62 ms", "1.25 s", "4000 s"]
    assert chips.fmt_rate(989.5e12, "FLOP/s") == "989.5 TFLOP/s"
    assert chips.fmt_rate(3.125e9, "B/s") == "3.125 GB/s"
