"""Chips as their vendors publish them, and a step's time on one.

``CHIPS`` is the one table of every device kind shardtypes knows: its memory (the capacity
``--hbm h100`` draws the plan's bar against) and its speeds (dense peak FLOP/s per dtype, memory
bandwidth, and the bandwidth of the links a device sends over), each figure with its source.
``step_time(cost, mesh_sizes, 'h100')`` turns what a step costs per device (``verify``'s
``report.cost``: FLOPs by dtype, bytes read and written from memory, bytes sent per group of mesh
axes) into seconds on that chip: a lower bound, at peak rates, with no latency, either without
overlap (the sum) or with perfect overlap (the largest part), and what bounds it: a
``StepBound``, the ``Bound`` (compute, memory or communication) with its figures, whose
``str()`` is the sentence the reports show. Which mesh axes run over which link is ``links=``
(``{'t': 'nvlink', 'd': 'network'}``, or bandwidths such as ``{'d': '50GB/s'}``); by default the
mesh's trailing axes run over the fast link while their devices fit in one of its domains (8 GPUs
of an NVLink node, one TPU slice) and the rest over the slow one. docs/chips.md lists the figures with their sources.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
from typing import Any, Mapping

from ..language import fmt_bytes, fmt_flops
from . import fields
from .step_cost import StepCost

__all__ = ["Chip", "Link", "Bound", "StepBound", "StepTime", "CHIPS", "ALIASES", "DEVICE_KINDS", "chip_named",
           "known_chips", "parse_bandwidth", "axis_links", "step_time", "fmt_seconds", "fmt_rate"]

# Sources (vendor data sheets and the Cloud TPU docs), cited by each chip below.
_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_A100 = "https://www.nvidia.com/en-us/data-center/a100/"
_DGX_H100 = "https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html"
_DGX_A100 = "https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html"
_TPU_V4 = "https://cloud.google.com/tpu/docs/v4"
_TPU_V5E = "https://cloud.google.com/tpu/docs/v5e"
_TPU_V5P = "https://cloud.google.com/tpu/docs/v5p"
_TPU_V6E = "https://cloud.google.com/tpu/docs/v6e"
_JAX_PRECISION = "https://docs.jax.dev/en/latest/_autosummary/jax.lax.Precision.html"

T = 10**12
G = 10**9


@dataclasses.dataclass(frozen=True)
class Chip:
    """One device kind: memory, peak rates and links, as published.

    ``flops`` is dense peak FLOP/s (OP/s for int8) per class of dtype: 'fp8', 'int8', 'bf16',
    'fp16', 'tf32' (NVIDIA's tensor-core float32) and 'fp32'; ``float32_as`` is the class a
    float32 matmul runs at under JAX's default precision ('tf32' on A100 and H100, one 'bf16'
    pass on TPU). ``links`` is the bytes per second one device sends over each kind of link (None
    where no figure is published); ``fast`` and ``slow`` name the link within and across a
    ``domain`` of devices (8 GPUs of a node; the chips of one TPU slice). ``sources`` back every
    figure; ``notes`` say how one was read from them."""

    name: str
    description: str
    hbm_bytes: int
    hbm_bandwidth: float
    flops: Mapping[str, float]
    float32_as: str
    links: Mapping[str, float | None]
    fast: str
    slow: str
    domain: int
    sources: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def rate(self, dtype: Any) -> tuple[float, str, str | None]:
        """The peak rate for ``dtype`` (a name such as 'bfloat16' or a numpy dtype): (FLOP/s, the
        class it was taken from, and a sentence when the chip publishes no figure for it and a
        neighbouring one stands in). Integer and bool ops (elementwise: indices, masks) run at the
        fp32 rate (bf16 on TPUs), unsaid."""
        name = _dtype_name(dtype)
        cls = _DTYPE_CLASSES.get(name) or ("fp8" if name.startswith("float8") else None)
        want = self.float32_as if cls == "fp32" else cls
        if want is not None and want in self.flops:
            return self.flops[want], want, None
        stand_in = "fp32" if want is None and "fp32" in self.flops else "bf16"
        if want is None and (name == "bool" or re.fullmatch(r"u?int\d+", name)):
            return self.flops[stand_in], stand_in, None  # elementwise integer ops: no chip publishes a rate
        missing = f"no {want} rate" if want else f"no rate for {name}"
        return (self.flops[stand_in], stand_in, f"{name} counted at {self.name}'s {stand_in} rate "
                f"({fmt_rate(self.flops[stand_in], 'FLOP/s')}): it publishes {missing}")


_DTYPE_CLASSES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int8": "int8", "uint8": "int8",
                  "int4": "int8", "uint4": "int8"}


def _dtype_name(dtype: Any) -> str:
    name = getattr(dtype, "name", None) or str(dtype)
    return {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64"}.get(name, name)


@dataclasses.dataclass(frozen=True)
class Link:
    """What a mesh axis runs over: ``name`` (a chip's link such as 'nvlink', or the bandwidth the
    user gave, as written) and the bytes per second one device sends over it."""

    name: str
    bytes_per_second: float

    def __str__(self) -> str:
        rate = fmt_rate(self.bytes_per_second, "B/s")
        return rate if self.name == rate else f"{self.name}, {rate}"


def _gpu(name: str, description: str, hbm_gib: int, hbm_bandwidth: float, flops: Mapping[str, float],
         nvlink: float, network: float, sources: tuple[str, ...], notes: tuple[str, ...]) -> Chip:
    return Chip(name, description, hbm_gib * 2**30, hbm_bandwidth, dict(flops), "tf32",
                {"nvlink": nvlink, "network": network}, "nvlink", "network", 8, sources, notes)


def _tpu(name: str, description: str, hbm_gib: int, hbm_bandwidth: float, flops: Mapping[str, float],
         ici: float | None, dcn: float | None, slice_chips: int, sources: tuple[str, ...],
         notes: tuple[str, ...]) -> Chip:
    return Chip(name, description, hbm_gib * 2**30, hbm_bandwidth, dict(flops), "bf16",
                {"ici": ici, "dcn": dcn}, "ici", "dcn", slice_chips, sources, notes)


_SPARSITY = "dense rates: half the figures NVIDIA quotes with structured sparsity"
_NVLINK = "NVLink: the published total (both directions) halved, what one GPU sends"
_ICI = "ICI: the published bidirectional bandwidth per chip halved, what one chip sends over all its ports"
_HOPPER_FLOPS = {"fp8": 1979 * T, "int8": 1979 * T, "bf16": 989.5 * T, "fp16": 989.5 * T, "tf32": 494.5 * T,
                 "fp32": 67 * T}
_AMPERE_FLOPS = {"int8": 624 * T, "bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T}

# Memory is read as GiB (HBM stacks come in binary sizes; a runtime leaves a little less free,
# e.g. nvidia-smi shows 79.6 GiB on an H100 80GB).
CHIPS: dict[str, Chip] = {c.name: c for c in (
    _gpu("h100", "NVIDIA H100 SXM5 80GB HBM3, 8 per HGX/DGX node", 80, 3.35 * T, _HOPPER_FLOPS,
         nvlink=450 * G, network=400 * G / 8, sources=(_H100, _DGX_H100),
         notes=(_SPARSITY, _NVLINK + " (900 GB/s published)",
                "network: one 400 Gb/s ConnectX-7 InfiniBand port per GPU (DGX H100)")),
    _gpu("h200", "NVIDIA H200 SXM 141GB HBM3e, 8 per HGX/DGX node", 141, 4.8 * T, _HOPPER_FLOPS,
         nvlink=450 * G, network=400 * G / 8, sources=(_H200, _DGX_H100),
         notes=(_SPARSITY, _NVLINK + " (900 GB/s published)",
                "network: one 400 Gb/s InfiniBand port per GPU, as in DGX H100/H200")),
    _gpu("a100-80gb", "NVIDIA A100 SXM 80GB HBM2e, 8 per HGX/DGX node", 80, 2.039 * T, _AMPERE_FLOPS,
         nvlink=300 * G, network=200 * G / 8, sources=(_A100, _DGX_A100),
         notes=(_SPARSITY + "; no fp8", _NVLINK + " (600 GB/s published)",
                "network: one 200 Gb/s HDR InfiniBand port per GPU (DGX A100)")),
    _gpu("a100-40gb", "NVIDIA A100 SXM 40GB HBM2, 8 per HGX/DGX node", 40, 1.555 * T, _AMPERE_FLOPS,
         nvlink=300 * G, network=200 * G / 8, sources=(_A100, _DGX_A100),
         notes=(_SPARSITY + "; no fp8", _NVLINK + " (600 GB/s published)",
                "network: one 200 Gb/s HDR InfiniBand port per GPU (DGX A100)")),
    _tpu("tpu-v4", "Cloud TPU v4, 32 GiB HBM2 per chip", 32, 1.2 * T, {"bf16": 275 * T, "int8": 275 * T},
         ici=None, dcn=None, slice_chips=4096, sources=(_TPU_V4,),
         notes=("the Cloud TPU docs publish no ICI or DCN bandwidth per chip for v4: give links= bandwidths",)),
    _tpu("tpu-v5e", "Cloud TPU v5e, 16 GB HBM2 per chip", 16, 819 * G, {"bf16": 197 * T, "int8": 393 * T},
         ici=200 * G, dcn=2 * 100 * G / 8 / 8, slice_chips=256, sources=(_TPU_V5E, _TPU_V6E),
         notes=(_ICI + " (400 GB/s, or 1,600 Gbps one way)",
                "DCN: the host's 2 x 100 Gbps NICs shared by its 8 chips (25 Gbps per chip)",
                "a slice: at most 256 chips (one v5e Pod)")),
    _tpu("tpu-v5p", "Cloud TPU v5p, 95 GB HBM2e per chip", 95, 2765 * G, {"bf16": 459 * T, "fp8": 459 * T},
         ici=600 * G, dcn=50 * G / 8, slice_chips=6144, sources=(_TPU_V5P,),
         notes=(_ICI + " (1,200 GB/s, or 4,800 Gbps one way)", "DCN: 50 Gbps per chip",
                "a slice: at most 6,144 chips (96 cubes)")),
    _tpu("tpu-v6e", "Cloud TPU v6e (Trillium), 32 GB HBM per chip", 32, 1600 * G,
         {"bf16": 918 * T, "int8": 1836 * T}, ici=400 * G, dcn=4 * 200 * G / 8 / 8, slice_chips=256,
         sources=(_TPU_V6E,),
         notes=(_ICI + " (800 GB/s)", "DCN: the host's 4 x 200 Gbps NICs shared by its 8 chips (100 Gbps per chip)",
                "a slice: at most 256 chips (one v6e Pod)")),
)}

# Short names: 'a100' is the 80GB part.
ALIASES = {"a100": "a100-80gb"}

# Memory per device kind, for --hbm: (bytes, description); the same table, read for memory alone.
_ORDER = ("h100", "h200", "a100", "a100-40gb", "a100-80gb", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")
DEVICE_KINDS: dict[str, tuple[int, str]] = {
    name: (CHIPS[ALIASES.get(name, name)].hbm_bytes, CHIPS[ALIASES.get(name, name)].description) for name in _ORDER}


def known_chips() -> list[str]:
    """Every name ``chip=`` and ``--hbm`` take, in the order the docs list them."""
    return list(DEVICE_KINDS)


def chip_named(value: Any, option: str = "chip") -> Chip:
    """The chip ``value`` names (case and spaces aside; a ``Chip`` is taken as is); anything else
    raises an error naming ``option`` and the known chips."""
    if isinstance(value, Chip):
        return value
    known = ", ".join(known_chips())
    if not isinstance(value, str):
        raise TypeError(f"{option}: expected a chip name ({known}), got {type(value).__name__} {value!r:.60}")
    key = value.strip().lower()
    chip = CHIPS.get(ALIASES.get(key, key))
    if chip is None:
        close = difflib.get_close_matches(key, known_chips(), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{option}: {value!r} is not a known chip{hint}; known chips: {known}")
    return chip


# ---------------------------------------------------------------------------------------------
# Bandwidths as people write them: bytes (B) or bits (b) per second, decimal or binary prefixes.

_BANDWIDTH = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgGtT]?)(i?)([Bb])\s*(?:/\s*s|ps)\s*")
_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_bandwidth(value: Any, option: str = "links") -> float:
    """Bytes per second from ``'50GB/s'``, ``'400Gb/s'`` or ``'400Gbps'`` (B is bytes, b bits),
    ``'1.2 TB/s'``, ``'900GiB/s'``, or a positive number of bytes per second; anything else
    raises an error naming ``option`` and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{option}: expected a bandwidth such as '50GB/s' or '400Gb/s', "
                        f"got {type(value).__name__} {value!r:.60}")
    if isinstance(value, str):
        match = _BANDWIDTH.fullmatch(value)
        if match is None:
            raise ValueError(f"{option}: {value!r} is not a bandwidth; write a number and a unit per second, "
                             "as 50GB/s, 400Gb/s or 400Gbps (B bytes, b bits; k, M, G, T, or KiB, GiB, ...)")
        number, prefix, binary, unit = match.groups()
        scale = (_BINARY if binary else _PREFIX)[prefix.lower()]
        rate = float(number) * scale / (8 if unit == "b" else 1)
    else:
        rate = float(value)
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"{option}: a bandwidth must be positive and finite, got {value!r}")
    return rate


def axis_links(mesh_sizes: Mapping[str, int], chip: Any, links: Mapping[str, Any] | None = None, *,
               chip_option: str = "chip", links_option: str = "links") -> dict[str, Link]:
    """The link each mesh axis runs over on ``chip``: from ``links`` (axis -> one of the chip's
    links, such as 'nvlink', or a bandwidth such as '50GB/s'; every axis with more than one
    device named, no axis outside the mesh), or by default the trailing axes whose devices fit in
    one of the chip's domains (8 GPUs, a TPU slice) over its fast link and the rest over its slow
    one. A link the chip publishes no figure for is an error asking for a bandwidth."""
    chip = chip_named(chip, chip_option)
    sizes = dict(mesh_sizes)
    chosen: dict[str, str | float | int] = {}
    if links is None:
        devices = 1
        for axis in reversed(list(sizes)):
            devices *= sizes[axis]
            chosen[axis] = chip.fast if devices <= chip.domain else chip.slow
        chosen = {a: chosen[a] for a in sizes}
        default = True
    else:
        if not isinstance(links, Mapping):
            raise TypeError(f"{links_option}: expected a mapping of mesh axis to a link ({', '.join(chip.links)}) "
                            f"or a bandwidth such as '50GB/s', got {type(links).__name__} {links!r:.60}")
        unknown = [a for a in links if a not in sizes]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), list(sizes), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{links_option}: {unknown[0]!r} is not a mesh axis{hint}; the mesh's axes are "
                             f"{', '.join(sizes)}")
        missing = [a for a, n in sizes.items() if n > 1 and a not in links]
        if missing:
            raise ValueError(f"{links_option}: mesh axis {missing[0]!r} ({sizes[missing[0]]} devices) is mapped to "
                             f"no link; give every mesh axis one of {chip.name}'s links "
                             f"({', '.join(chip.links)}) or a bandwidth such as '50GB/s', "
                             f"e.g. {_example(sizes, chip, False, links_option)}")
        chosen = {a: links.get(a, chip.fast) for a in sizes}
        default = False
    out: dict[str, Link] = {}
    for axis, what in chosen.items():
        where = f"{links_option}[{axis!r}]"
        if isinstance(what, str) and what.strip().lower() in chip.links:
            name = what.strip().lower()
            rate = chip.links[name]
            if rate is None:
                how = f"give {links_option} bandwidths, e.g. {_example(sizes, chip, True, links_option)}"
                if default:
                    raise ValueError(f"{chip_option}: {chip.name} publishes no {name} bandwidth, the link mesh axis "
                                     f"{axis!r} runs over by default; {how}")
                raise ValueError(f"{where}: {chip.name} publishes no {name} bandwidth; {how}")
            out[axis] = Link(name, rate)
        elif isinstance(what, str) and not any(c.isdigit() for c in what):
            raise ValueError(f"{where}: {what!r} is neither one of {chip.name}'s links ({', '.join(chip.links)}) "
                             "nor a bandwidth such as '50GB/s'")
        else:
            rate = parse_bandwidth(what, where)
            out[axis] = Link(what.strip() if isinstance(what, str) else fmt_rate(rate, "B/s"), rate)
    return out


def _example(sizes: Mapping[str, int], chip: Chip, bandwidths: bool, option: str) -> str:
    """Links for every axis of ``sizes`` as ``option`` takes them: '{'d': 'network', 't': 'nvlink'}'
    in Python, 'd=network,t=nvlink' on the command line."""
    names = list(sizes)
    picks = ["50GB/s"] * len(names) if bandwidths else [chip.slow] * (len(names) - 1) + [chip.fast]
    if option.startswith("--"):
        return ",".join(f"{a}={p}" for a, p in zip(names, picks))
    return "{" + ", ".join(f"{a!r}: {p!r}" for a, p in zip(names, picks)) + "}"


# ---------------------------------------------------------------------------------------------
# A step's time on a chip.


class Bound(enum.Enum):
    """What bounds a step's time: the part of it that takes longest (``StepBound.kind``)."""

    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    NOTHING = "nothing"  # every part takes 0 s: the step is free


@dataclasses.dataclass(frozen=True)
class StepBound:
    """What bounds a step on a chip, as figures; ``str()`` is the sentence the reports show.

    ``kind`` (a ``Bound``) names the part that takes longest: its ``seconds`` of the parts'
    ``total`` (their sum, no overlap). ``amount`` is what that part does per device and ``rate``
    how fast it goes: for compute, FLOPs at ``chip``'s peak FLOP/s for the class of dtype
    ``rate_class`` ('bf16') of the ``dtype`` that takes most of the time; for memory, bytes read
    and written at the memory bandwidth; for communication, bytes sent over the mesh ``axes`` at
    the bytes per second of ``link``, the slowest link they run over, ``collective`` the kind that
    sends most ('all-gather'; '' where none is known) and ``where`` the line of the user's code
    it sends most from. ``share`` is the largest dtype's share of the FLOPs, or the largest
    collective's of the bytes; None where there is only one."""

    kind: Bound
    seconds: float = 0.0
    total: float = 0.0
    amount: float = 0.0
    rate: float = 0.0
    chip: str = ""
    rate_class: str = ""
    dtype: str = ""
    axes: tuple[str, ...] = ()
    link: Link | None = None
    collective: str = ""
    where: str = ""
    share: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Bound):
            raise TypeError(f"StepBound: kind must be a Bound ({', '.join(b.name for b in Bound)}), got "
                            f"{type(self.kind).__name__} {self.kind!r:.60}")
        fields.seconds("StepBound", "seconds", self.seconds)
        fields.seconds("StepBound", "total", self.total)
        fields.amount("StepBound", "amount", self.amount)
        fields.amount("StepBound", "rate", self.rate)
        for name in ("chip", "rate_class", "dtype", "collective", "where"):
            fields.text("StepBound", name, getattr(self, name))
        fields.texts("StepBound", "axes", self.axes)
        if self.link is not None and not isinstance(self.link, Link):
            raise TypeError(f"StepBound: link must be a Link or None, got {type(self.link).__name__}")
        if self.share is not None:
            fields.fraction("StepBound", "share", self.share)

    def __str__(self) -> str:
        if self.kind is Bound.NOTHING:
            return "nothing: the step is free"
        if self.kind is Bound.COMPUTE:
            share = "" if self.share is None else f" ({self.share:.0%} of them {self.dtype})"
            what = (f"compute: {fmt_flops(self.amount, 'short')} per device{share} at {self.chip}'s "
                    f"{self.rate_class} peak of {fmt_rate(self.rate, 'FLOP/s')}")
        elif self.kind is Bound.MEMORY:
            what = (f"memory: {fmt_bytes(self.amount, 'short')} read and written per device at "
                    f"{fmt_rate(self.rate, 'B/s')}")
        else:
            link = self.link if self.link is not None else fmt_rate(self.rate, "B/s")
            sent = f"{fmt_bytes(self.amount, 'short')} sent per device"
            if self.collective:
                share = "" if self.share is None else f"{self.share:.0%} of "
                most = f", most from {self.where}" if self.where else ""
                sent = f"the {_plural(self.collective)}, {share}{sent}{most}"
            what = f"communication over {_axes_text(self.axes)} ({link}): {sent}"
        return f"{what}, {fmt_seconds(self.seconds)} of {fmt_seconds(self.total)}"


@dataclasses.dataclass(frozen=True)
class StepTime:
    """A step's time per device on ``chip``, in seconds, at peak rates with no latency: a lower
    bound. ``compute`` (FLOPs by dtype at their peak rates), ``memory`` (bytes read and written at
    the memory bandwidth), ``communication`` per group of mesh axes (bytes sent at the bandwidth of
    the slowest link those axes run over, ``links``); ``no_overlap`` is their sum,
    ``perfect_overlap`` the largest, and ``bound`` (a ``StepBound``) says which it is and what
    makes it up: ``bound.kind`` is a ``Bound``, ``str(bound)`` a sentence.
    ``assumptions`` say where a figure stood in for another or bytes were not known."""

    chip: str
    compute: float
    memory: float
    communication: Mapping[tuple[str, ...], float]
    links: Mapping[str, Link]
    bound: StepBound
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        fields.text("StepTime", "chip", self.chip)
        fields.seconds("StepTime", "compute", self.compute)
        fields.seconds("StepTime", "memory", self.memory)
        fields.mapping("StepTime", "communication", self.communication, "axes", fields.seconds)

        def link(owner: str, field: str, value: object) -> None:
            if not isinstance(value, Link):
                raise TypeError(f"{owner}: {field} must be a Link, got {type(value).__name__}")

        fields.mapping("StepTime", "links", self.links, "str", link)
        if not isinstance(self.bound, StepBound):
            raise TypeError(f"StepTime: bound must be a StepBound, got {type(self.bound).__name__} "
                            f"{self.bound!r:.60}")
        fields.texts("StepTime", "assumptions", self.assumptions)

    @property
    def no_overlap(self) -> float:
        return self.compute + self.memory + sum(self.communication.values())

    @property
    def perfect_overlap(self) -> float:
        return max([self.compute, self.memory, *self.communication.values()])

    @property
    def communication_by_axis(self) -> dict[str, float]:
        """Seconds of communication per mesh axis: a group's time counted once on each of its axes."""
        out: dict[str, float] = {}
        for axes, seconds in self.communication.items():
            for a in axes:
                out[a] = out.get(a, 0.0) + seconds
        return out

    def __str__(self) -> str:
        comm = ", ".join(f"{_axes_text(axes)} {fmt_seconds(s)}" for axes, s in self.communication.items()) or "none"
        return (f"{fmt_seconds(self.perfect_overlap)} to {fmt_seconds(self.no_overlap)} per step on {self.chip} "
                f"(perfect overlap to none): compute {fmt_seconds(self.compute)}, memory {fmt_seconds(self.memory)}, "
                f"communication {comm}; bound by {self.bound}")

    def to_dict(self) -> dict[str, Any]:
        return {"chip": self.chip, "compute": self.compute, "memory": self.memory,
                "communication": [{"axes": list(axes), "seconds": s} for axes, s in self.communication.items()],
                "links": {a: {"link": link.name, "bytes_per_second": link.bytes_per_second}
                          for a, link in self.links.items()},
                "no_overlap": self.no_overlap, "perfect_overlap": self.perfect_overlap,
                "bound": str(self.bound), "bound_kind": self.bound.kind.value,
                "assumptions": list(self.assumptions)}


def step_time(cost: StepCost, mesh_sizes: Mapping[str, int], chip: Any, links: Mapping[str, Any] | None = None, *,
              chip_option: str = "chip", links_option: str = "links") -> StepTime:
    """``cost`` (a ``StepCost``, verify's ``report.cost``: ``flops_by_dtype``,
    ``memory_bytes_per_device`` and ``communication.by_axes``, bytes one device sends per group of
    mesh axes) in seconds on ``chip`` over ``mesh_sizes``, with each axis on the link ``links``
    gives it (see ``axis_links``). Anything but a StepCost is a TypeError naming ``cost``."""
    _check_step_cost(cost)
    chip = chip_named(chip, chip_option)
    mesh = dict(mesh_sizes)
    wired = axis_links(mesh, chip, links, chip_option=chip_option, links_option=links_option)
    assumptions: list[str] = []
    compute, by_dtype = _compute_seconds(cost.flops_by_dtype, chip, assumptions)
    memory_bytes = _number(cost.memory_bytes_per_device, "memory bytes", assumptions)
    memory = memory_bytes / chip.hbm_bandwidth
    comm, sent = _communication_seconds(cost.communication.by_axes, mesh, wired, assumptions)
    lower = (*cost.lower_bound, *cost.communication.lower_bound)
    assumptions += [f"a lower bound: {why}" for why in lower]

    parts = [(compute, Bound.COMPUTE, ()), (memory, Bound.MEMORY, ()),
             *((seconds, Bound.COMMUNICATION, axes) for axes, seconds in comm.items())]
    total = sum(seconds for seconds, _, _ in parts)
    seconds, kind, axes = max(parts, key=lambda p: p[0])
    if not total > 0:
        bound = StepBound(Bound.NOTHING)
    elif kind is Bound.COMPUTE:
        bound = _compute_bound(by_dtype, chip, seconds, total)
    elif kind is Bound.MEMORY:
        bound = StepBound(Bound.MEMORY, seconds, total, memory_bytes, chip.hbm_bandwidth)
    else:
        bound = _communication_bound(axes, sent[axes], wired, cost.communication, seconds, total)
    return StepTime(chip.name, compute, memory, comm, wired, bound, tuple(dict.fromkeys(assumptions)))


def _check_step_cost(cost: Any) -> None:
    """``cost`` is a StepCost (verify's ``report.cost``)."""
    if not isinstance(cost, StepCost):
        raise TypeError(f"step_time: cost must be a StepCost (verify's report.cost), got "
                        f"{type(cost).__name__} {cost!r:.60}")


def _number(value: Any, what: str, assumptions: list[str]) -> float:
    """A count as a float; a symbolic one (dims verify was not given) counts as 0, said."""
    try:
        return float(value)
    except (TypeError, ValueError):
        assumptions.append(f"{what} unknown ({value}: a symbolic size); counted as 0")
        return 0.0


def _compute_seconds(flops_by_dtype: Mapping[str, Any], chip: Chip, assumptions: list[str],
                     ) -> tuple[float, dict[str, tuple[float, float, str]]]:
    """Seconds of compute, each dtype's FLOPs at its peak rate; and per dtype name, (FLOPs, the
    rate, the class of dtype it is the rate of)."""
    seconds = 0.0
    by_dtype: dict[str, tuple[float, float, str]] = {}
    for dtype, flops in flops_by_dtype.items():
        n = _number(flops, f"{dtype} FLOPs", assumptions)
        if not n:
            continue
        rate, cls, note = chip.rate(dtype)
        if note:
            assumptions.append(note)
        seconds += n / rate
        by_dtype[_dtype_name(dtype)] = (n, rate, cls)
    return seconds, by_dtype


def _communication_seconds(by_axes: Mapping[Any, Any], mesh: Mapping[str, int], wired: Mapping[str, Link],
                           assumptions: list[str]) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    """Per group of mesh axes, the seconds its bytes take over the slowest link of the group,
    and the bytes; an axis outside the mesh is an error."""
    seconds: dict[tuple[str, ...], float] = {}
    sent: dict[tuple[str, ...], float] = {}
    for axes, nbytes in by_axes.items():
        axes = (axes,) if isinstance(axes, str) else tuple(axes)
        n = _number(nbytes, f"bytes over {_axes_text(axes)}", assumptions)
        outside = [a for a in axes if a not in wired]
        if outside:
            raise ValueError(f"step_time: the step sends bytes over mesh axis {outside[0]!r}, which the mesh "
                             f"{dict(mesh)} does not have")
        if not axes or not n:
            continue
        rate = min(wired[a].bytes_per_second for a in axes)
        seconds[axes] = seconds.get(axes, 0.0) + n / rate
        sent[axes] = sent.get(axes, 0.0) + n
    return seconds, sent


def _compute_bound(by_dtype: Mapping[str, tuple[float, float, str]], chip: Chip, seconds: float,
                   total: float) -> StepBound:
    """Compute as the bound: all the FLOPs, at the rate of the dtype that takes most of the time."""
    name, (flops, rate, cls) = max(by_dtype.items(), key=lambda kv: kv[1][0] / kv[1][1])
    all_flops = sum(f for f, _, _ in by_dtype.values())
    share = None if len(by_dtype) == 1 else flops / all_flops
    return StepBound(Bound.COMPUTE, seconds, total, all_flops, rate, chip.name, cls, name, share=share)


def _communication_bound(axes: tuple[str, ...], nbytes: float, wired: Mapping[str, Link], communication: Any,
                         seconds: float, total: float) -> StepBound:
    """Communication over ``axes`` as the bound: its bytes, its slowest link, and the kind of
    collective that sends most of them, with the line of the user's code it sends most from."""
    link = wired[min(axes, key=lambda a: wired[a].bytes_per_second)]
    kinds: dict[str, float] = {}
    where: dict[tuple[str, str], float] = {}
    for c in communication.collectives:
        if tuple(c.axes) != axes:
            continue
        try:
            n = float(c.bytes) * float(c.times)
        except (TypeError, ValueError):
            continue
        kinds[c.kind] = kinds.get(c.kind, 0.0) + n
        if c.where:
            where[c.kind, c.where] = where.get((c.kind, c.where), 0.0) + n
    if not kinds:
        return StepBound(Bound.COMMUNICATION, seconds, total, nbytes, link.bytes_per_second, axes=axes, link=link)
    kind, n = max(kinds.items(), key=lambda kv: kv[1])
    at = {w: b for (k, w), b in where.items() if k == kind}
    share = n / nbytes if len(kinds) > 1 and nbytes else None
    return StepBound(Bound.COMMUNICATION, seconds, total, nbytes, link.bytes_per_second, axes=axes, link=link,
                     collective=kind, where=max(at, key=at.__getitem__) if at else "", share=share)


def _plural(kind: str) -> str:
    return kind if kind.endswith("s") else kind + "s"


def _axes_text(axes: tuple[str, ...]) -> str:
    return " x ".join(repr(a) for a in axes) if axes else "no axis"


def fmt_rate(rate: float, unit: str) -> str:
    """``989.5e12, 'FLOP/s'`` -> '990 TFLOP/s'; ``450e9, 'B/s'`` -> '450 GB/s' (decimal prefixes, as
    vendors write rates)."""
    for scale, prefix in ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k")):
        if rate >= scale:
            return f"{rate / scale:.4g} {prefix}{unit}"
    return f"{rate:.4g} {unit}"


def fmt_seconds(seconds: float) -> str:
    """'62.0 ms', '1.25 s', '830 µs', '0 s' (three significant digits)."""
    if seconds <= 0:
        return "0 s"
    seconds = float(f"{seconds:.3g}")  # (999.6 ms is '1 s', not '1e+03 ms')
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if seconds >= scale or unit == "ns":
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")
