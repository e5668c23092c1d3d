"""An oracle for the step cost (``shardtypes.tools.step_cost``): the collectives and matmul FLOPs
of XLA's compiled program (``jax.jit(step).lower(...).compile().as_text()``), per device, with the
same cost convention: all-gather (n-1)/n of the gathered result, reduce-scatter (n-1)/n of the
operand, all-reduce 2(n-1)/n of the operand, all-to-all (n-1)/n of the operand, a permute its
operand; a dot 2 x result elements x contracted size. Every computation counts as often as it
runs: a while loop's body its trip count (XLA's ``known_trip_count`` where it says it, else the
constant its condition compares the counter with), a fusion's computation once per fusion.

``reduce_scatter=True`` (the default) counts an all-reduce whose every use takes a 1/n slice of it
(a ``dynamic-slice``, or a fusion that reads it only through one, bitcasts, copies and
transposes aside; a tuple all-reduce element by element) as the reduce-scatter a GPU or TPU
backend makes of it: (n-1)/n of the operand rather than 2(n-1)/n. XLA on CPU keeps the
all-reduce and the slice; ``reduce_scatter=False`` counts what it runs.

Shared by tests/tools/test_step_cost.py and benchmarks/step_cost.py.
"""

from __future__ import annotations

import math
import re

__all__ = ["XlaCost", "xla_cost", "parse_hlo"]

_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
             "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "s4": 1, "u4": 1}
_KINDS = {"all-gather": "all-gather", "reduce-scatter": "reduce-scatter", "all-reduce": "all-reduce",
          "all-to-all": "all-to-all", "collective-permute": "permute"}
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\dm\d\w*)?)\[([\d,]*)\]")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\((.*)$")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


class XlaCost:
    """Per device: ``collectives`` as (kind, n, bytes per run, runs), ``bytes`` sent in all,
    ``matmul_flops``."""

    def __init__(self, collectives: list, matmul_flops: int):
        self.collectives = collectives
        self.matmul_flops = matmul_flops

    @property
    def bytes(self) -> int:
        return sum(b * t for _, _, b, t in self.collectives)

    def __repr__(self) -> str:
        return f"XlaCost(bytes={self.bytes}, matmul_flops={self.matmul_flops}, collectives={self.collectives})"


def _arrays(text: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(text)
            if t in _ITEMSIZE]


def _nbytes(text: str) -> int:
    return sum(_ITEMSIZE[t] * math.prod(shape) for t, shape in _arrays(text))


def _group_size(attrs: str, devices: int) -> int:
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)
    if mesh:
        sizes = {a: int(n) for a, n in re.findall(r"'(\w+)'=(\d+)", mesh.group(1))}
        return math.prod(sizes[a] for a in re.findall(r"'(\w+)'", mesh.group(2)))
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
    if iota:
        return int(iota.group(2))
    listed = re.search(r"replica_groups=\{\{([\d,]*)\}", attrs)
    if listed:
        return len(listed.group(1).split(","))
    return devices


def parse_hlo(text: str, devices: int, reduce_scatter: bool = True) -> XlaCost:
    """The collectives and matmul FLOPs of an optimized HLO module's text (``reduce_scatter``:
    see the module's docstring)."""
    computations: dict[str, list] = {}
    shapes: dict[str, str] = {}
    entry = current = None
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head and "=" not in line.split("{")[0].split("(")[0]:
            current = head.group(2)
            computations[current] = []
            if head.group(1):
                entry = current
            continue
        found = _INSTRUCTION.match(line)
        if found and current is not None:
            name, shape, opcode, rest = found.groups()
            shapes[name] = shape
            computations[current].append((name, shape, opcode, rest))
    runs: dict[str, int] = {}

    def visit(comp: str, times: int) -> None:
        runs[comp] = runs.get(comp, 0) + times
        for _, _, opcode, rest in computations.get(comp, ()):
            trip = 1
            if opcode == "while":
                trip = _trip_count(rest, computations)
            for key, callee in re.findall(r"\b(calls|body|condition|true_computation|false_computation)=%?([\w.\-]+)",
                                          rest):
                visit(callee, times * (trip if key in ("body", "condition") else 1))
            for group in re.findall(r"branch_computations=\{([^}]*)\}", rest):
                for callee in re.findall(r"%?([\w.\-]+)", group):
                    visit(callee, times)

    visit(entry, 1)
    users = _users(computations)
    collectives: list = []
    flops = 0
    for comp, times in runs.items():
        for name, shape, opcode, rest in computations.get(comp, ()):
            base = opcode[:-len("-start")] if opcode.endswith("-start") else opcode
            operands = _operand_names(rest)
            if base in _KINDS:
                n = _group_size(rest, devices) if base != "collective-permute" else 2
                sizes = [_nbytes(shapes.get(o, "")) for o in operands]
                kind = _KINDS[base]
                parts = [(kind, sum(sizes))]
                if kind == "all-reduce" and reduce_scatter and n > 1:
                    sliced = _sliced(comp, name, len(sizes), n, users, computations)
                    parts = [(k, sum(b for b, s in zip(sizes, sliced) if s == (k == "reduce-scatter")))
                             for k in ("all-reduce", "reduce-scatter")]
                for kind, operand in parts:
                    sent = {"all-gather": operand * (n - 1), "reduce-scatter": operand * (n - 1) // n,
                            "all-reduce": 2 * operand * (n - 1) // n, "all-to-all": operand * (n - 1) // n,
                            "permute": operand}[kind]
                    if n > 1 and (sent or len(parts) == 1):
                        collectives.append((kind, n, sent, times))
            elif opcode == "dot":
                lhs = _arrays(shapes.get(operands[0], ""))
                contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest)
                out = _arrays(shape)
                if lhs and out:
                    dims = [int(d) for d in contracting.group(1).split(",") if d] if contracting else []
                    flops += 2 * math.prod(out[0][1]) * math.prod(lhs[0][1][d] for d in dims) * times
    return XlaCost(collectives, flops)


_THROUGH = {"bitcast", "copy", "transpose", "reshape", "all-reduce-done"}


def _users(computations: dict) -> dict:
    """(computation, instruction) -> its users there, as (name, shape, opcode, rest)."""
    found: dict = {}
    for comp, instructions in computations.items():
        for instruction in instructions:
            for o in _operand_names(instruction[3]):
                found.setdefault((comp, o), []).append(instruction)
    return found


def _sliced(comp: str, name: str, count: int, n: int, users: dict, computations: dict) -> list[bool]:
    """Per operand of the all-reduce ``name`` (``count`` of them, a tuple when more than one),
    whether every use of its result takes a 1/n slice."""
    if count == 1:
        return [_only_slices(comp, name, n, users, computations)]
    out = [True] * count
    for user in users.get((comp, name), ()):
        index = re.search(r"index=(\d+)", user[3]) if user[2] == "get-tuple-element" else None
        if index is None:
            return [False] * count
        i = int(index.group(1))
        out[i] = out[i] and _only_slices(comp, user[0], n, users, computations)
    return out


def _only_slices(comp: str, name: str, n: int, users: dict, computations: dict) -> bool:
    """Whether every use of ``name`` in ``comp`` (through bitcasts, copies, transposes; into a
    fusion, its parameter's uses there) is a dynamic-slice of 1/n of it."""
    found = users.get((comp, name), ())
    if not found:
        return False
    for user, shape, opcode, rest in found:
        if opcode in _THROUGH:
            ok = _only_slices(comp, user, n, users, computations)
        elif opcode == "dynamic-slice":
            whole = _nbytes(next((s for nm, s, _, _ in computations[comp] if nm == name), ""))
            ok = _operand_names(rest)[:1] == [name] and _nbytes(shape) * n == whole
        elif opcode == "fusion":
            callee = re.search(r"calls=%?([\w.\-]+)", rest)
            ok = callee is not None and all(
                _only_slices(callee.group(1), _parameter(computations, callee.group(1), i), n, users, computations)
                for i, o in enumerate(_operand_names(rest)) if o == name)
        else:
            ok = False
        if not ok:
            return False
    return True


def _parameter(computations: dict, comp: str, index: int) -> str:
    for name, _, opcode, rest in computations.get(comp, ()):
        if opcode == "parameter" and re.match(rf"\s*{index}\)", rest):
            return name
    return ""


def _operand_names(rest: str) -> list[str]:
    depth, end = 1, 0
    for i, ch in enumerate(rest):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                end = i
                break
    return re.findall(r"%([\w.\-]+)", rest[:end])


def _trip_count(rest: str, computations: dict) -> int:
    known = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"', rest)
    if known:
        return int(known.group(1))
    cond = re.search(r"condition=%?([\w.\-]+)", rest)
    for _, shape, opcode, rest_c in computations.get(cond.group(1) if cond else "", ()):
        if opcode == "constant" and shape.startswith("s32[]"):
            value = re.match(r"\s*(-?\d+)\)", rest_c)
            if value:
                return int(value.group(1))
    return 1


def xla_cost(jitted, *args, reduce_scatter: bool = True) -> XlaCost:
    """``parse_hlo`` of ``jitted.lower(*args).compile()``."""
    import jax

    compiled = jitted.lower(*args).compile()
    return parse_hlo(compiled.as_text(), jax.device_count(), reduce_scatter)
