"""The ``shardtypes`` command: plan, verify and search (rank layouts of) sharded models from the
terminal or CI.

Reports go to standard output, as text or (``--json``) as JSON in which sizes (bytes, element
counts, dims) are numbers; a symbolic size (a dim ``verify`` was not given) is its expression as a
string. ``shardtypes --version`` prints ``shardtypes <version>``.

Exit status: 0 when all is well, 1 when problems are found, 2 for bad usage, and 141 (128 +
SIGPIPE, what a shell reports for a command such as ``cat`` killed by a closed pipe) when the
reader of standard output goes away first, as in ``shardtypes plan ... | head -1``: the command
then ends quietly, without a traceback.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import inspect
import json
import operator
import os
import sys
from typing import Any, Iterator, Sequence

from ..context import RULES_HINT, AxisRules, axis_rules
from ..model import is_value_tree
from .chips import DEVICE_KINDS, axis_links, chip_named, fmt_seconds
from .html_page import write_html
from .html_parts import parse_capacity
from .memory_plan import PlanReport, parse_fraction, plan, plan_html
from .search import search
from .terminal import plan_lines, progress, render, use_colour
from .verification import VerifyReport, verify

# 128 + SIGPIPE (13): the status a shell reports for a command killed by writing to a closed pipe.
EXIT_BROKEN_PIPE = 141

PLAN_EXAMPLES = """\
  # one row per weight of a stacked layer on 4,096 devices, with 70B-class sizes
  shardtypes plan mymodel:Layers --mesh d=64,t=64 --dims layers=80,embed=8192,hidden=28672

  # the same as JSON, for a dashboard or a diff in review
  shardtypes plan mymodel:Weights --mesh d=64,t=64 --dims embed=8192,vocab=128256 --json

  # logical axis names, resolved through rules defined in your module
  shardtypes plan mymodel:Weights --mesh data=8,model=8 --rules mymodel:RULES --mode decode

  # exit 1 when more than 5% of the memory per device is replicated copies
  shardtypes plan mymodel:Weights --mesh d=64,t=64 --dims embed=8192,vocab=128256 --max-replicated 5%
"""

VERIFY_EXAMPLES = """\
  # evaluate a checked training step abstractly (no devices) and report every problem;
  # exit status 1 if there is one, so it can gate CI
  shardtypes verify mymodel:train_step --mesh d=64,t=64 --dims embed=8192,layers=80

  # parameters that are not arrays are given as Python literals
  shardtypes verify mymodel:decode --mesh data=16,model=8 --static steps=4,greedy=True

  # a state holding an optax state, given as a tree of ShapeDtypeStructs (or a function of
  # no arguments returning one, as jax.eval_shape(init, key))
  shardtypes verify mymodel:train_step --mesh d=8 --inputs state=mymodel:abstract_state

  # logical axis names, resolved through rules defined in your module
  shardtypes verify mymodel:train_step --mesh data=8,model=8 --rules mymodel:RULES

  # the step's time on a chip (a lower bound), with the link each mesh axis runs over
  shardtypes verify mymodel:train_step --mesh d=64,t=8 --dims embed=8192 --chip h100 --links t=nvlink,d=network

  # two layouts of one step compared (--rules given twice), side by side on a page
  shardtypes verify mymodel:train_step --mesh d=64,t=64 --chip h100 --rules mymodel:RULES \\
      --rules fsdp=mymodel:FSDP_RULES --html layouts.html
"""

SEARCH_EXAMPLES = """\
  # which mesh shape and which rule set? every shape of 4,096 devices over two axes, under
  # each rule set, ranked by the step's time per device on H100s; those over 80 GB marked
  shardtypes search mymodel:train_step --devices 4096 --axes d,t --rules fsdp=mymodel:FSDP \\
      --rules 'fsdp x tp'=mymodel:RULES --chip h100 --hbm h100 --dims embed=8192,layers=80

  # the best three side by side on a page, and the ranking as JSON
  shardtypes search mymodel:train_step --devices 64 --axes d,t --rules mymodel:RULES --chip tpu-v5p \\
      --html best.html --json
"""

TARGETS = """
MODULE:OBJECT is imported like `from MODULE import OBJECT` (dots allowed in OBJECT); the
current directory is on the import path.
"""

# The top-level --help shows every example; each subcommand's --help only its own.
EXAMPLES = "examples:\n" + PLAN_EXAMPLES + "\n" + VERIFY_EXAMPLES + "\n" + SEARCH_EXAMPLES + TARGETS


def _split_top_level(text: str) -> list[str]:
    """Splits on commas outside brackets and quotes: 'a=1,b=(2,3)' -> ['a=1', 'b=(2,3)']."""
    items, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def _pairs(text: str, convert) -> dict[str, Any]:
    """``name=value,...`` as a dict; errors say what is wrong (argparse names the flag)."""
    out: dict[str, Any] = {}
    if not text:
        return out
    for item in _split_top_level(text):
        if "=" not in item:
            raise argparse.ArgumentTypeError(f"expected name=value pairs separated by commas, got {item!r}")
        name, value = item.split("=", 1)
        name = name.strip()
        if not name.isidentifier():
            raise argparse.ArgumentTypeError(f"{name!r} is not a name")
        if name in out:
            raise argparse.ArgumentTypeError(f"{name!r} is given twice")
        try:
            out[name] = convert(value.strip())
        except (ValueError, SyntaxError) as e:
            raise argparse.ArgumentTypeError(f"bad value for {name}: {value!r} ({e})") from None
    return out


def _size(value: str) -> Any:
    size = ast.literal_eval(value)
    if isinstance(size, bool) or not isinstance(size, (int, tuple)):
        raise ValueError("a size is an int, or a tuple of ints for a '*name' dim")
    return size


def _mesh(text: str) -> dict[str, int]:
    mesh = _pairs(text, int)
    if not mesh:
        raise argparse.ArgumentTypeError("give the axes, as d=64,t=64")
    bad = {k: v for k, v in mesh.items() if v < 1}
    if bad:
        raise argparse.ArgumentTypeError(f"axis sizes must be positive, got {bad}")
    return mesh


def _capacity(text: str) -> str:
    try:
        parse_capacity(text, "--hbm")
        return text
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--hbm: ")) from None


def _chip(text: str) -> str:
    try:
        return chip_named(text, "--chip").name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--chip: ")) from None


def _rules_targets(given: Sequence[str] | None) -> dict[str, str]:
    """--rules as label -> MODULE:OBJECT: 'label=MODULE:OBJECT', or MODULE:OBJECT labelled by its
    OBJECT (by the whole target where two OBJECTs share a name)."""
    pairs: list[tuple[str | None, str]] = []
    for text in given or ():
        label, sep, target = text.partition("=")
        pairs.append((label.strip(), target.strip()) if sep and ":" in target else (None, text))
    names = [given_label or where.rpartition(":")[2] for given_label, where in pairs]
    out: dict[str, str] = {}
    for (given_label, target), name in zip(pairs, names):
        key = given_label or (name if names.count(name) == 1 else target)
        if key in out:
            raise ValueError(f"--rules: {key!r} is given twice")
        out[key] = target
    return out


def _share(text: str) -> float:
    try:
        return parse_fraction(text, "--max-replicated")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--max-replicated: ")) from None


def _load(target: str) -> Any:
    if ":" not in target:
        raise SystemExit(f"shardtypes: expected MODULE:OBJECT, got {target!r}")
    module_name, attr = target.split(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise SystemExit(f"shardtypes: cannot import {module_name!r}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"shardtypes: {module_name!r} has no {attr!r}") from None
    return obj


def _inputs(parser: argparse.ArgumentParser, target: Any, given: list[str] | None) -> dict[str, Any] | None:
    """``--inputs NAME=MODULE:OBJECT`` (repeated): each parameter's tree of values, loaded (and
    called, when it is a function of no arguments); an error names the option and the parameter."""
    if not given:
        return None
    try:
        parameters = list(inspect.signature(inspect.unwrap(target)).parameters)
    except (TypeError, ValueError):
        parameters = []
    out: dict[str, Any] = {}
    for text in given:
        name, eq, where = text.partition("=")
        if not eq or not name.isidentifier() or ":" not in where:
            parser.error(f"--inputs {text}: expected NAME=MODULE:OBJECT, as state=mymodel:abstract_state")
        if name not in parameters:
            parser.error(f"--inputs {text}: the function has no parameter {name!r} (its parameters: {parameters})")
        if name in out:
            parser.error(f"--inputs {text}: {name!r} is given twice")
        value = _load(where)
        if callable(value) and not is_value_tree(value):
            value = _called(parser, f"--inputs {text}", where, value)
        if not is_value_tree(value):
            parser.error(f"--inputs {text}: expected a tree of arrays or jax.ShapeDtypeStructs (or a function of no "
                         f"arguments returning one), found {type(value).__qualname__}")
        out[name] = value
    return out


def _called(parser: argparse.ArgumentParser, option: str, where: str, function: Any) -> Any:
    """What the user's function of no arguments returns; its error is bad usage, named."""
    try:
        return function()
    except Exception as e:  # the user's function: its error, named
        parser.error(f"{option}: calling {where}() raised {type(e).__name__}: {e}")


def _plan_target(parser: argparse.ArgumentParser, where: str, target: Any) -> Any:
    """``plan``'s target: an annotation or a tree of values, or a function of no arguments that
    returns a tree of values (an abstract train state, as ``--inputs`` takes), called."""
    if not inspect.isfunction(target) or is_value_tree(target):
        return target
    try:
        required = [p for p in inspect.signature(target).parameters.values()
                    if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return target
    if required:
        return target  # (plan says a function has no layout)
    value = _called(parser, where, where, target)
    if not is_value_tree(value):
        parser.error(f"{where}: {where}() returned {type(value).__qualname__}, not a tree of arrays or "
                     "jax.ShapeDtypeStructs to plan")
    return value


def _json_size(value: Any) -> Any:
    """A size as JSON: an int as a number, a tuple (a '*name' dim) as a list, and a symbolic
    size, which has no number yet, as its expression ('64*batch')."""
    if isinstance(value, (list, tuple)):
        return [_json_size(v) for v in value]
    if isinstance(value, (bool, float)):
        return value
    try:
        return operator.index(value)  # int, numpy integers
    except TypeError:
        return str(value)


def _to_json(report: Any) -> str:
    """The report's JSON with its sizes as numbers (the reports' own ``to_json`` writes shapes
    and dims as strings); every other field as the report writes it."""
    data = json.loads(report.to_json())
    if isinstance(report, PlanReport):
        for row, r in zip(data["rows"], report.rows):
            for key in ("shape", "device_shape", "bytes_per_device", "replicas", "global_bytes"):
                row[key] = _json_size(getattr(r, key))
        for key in ("devices", "bytes_per_device", "global_bytes"):
            data[key] = _json_size(getattr(report, key))
    elif isinstance(report, VerifyReport):
        data["dims"] = {k: _json_size(v) for k, v in report.dims.items()}
    data["mesh"] = {k: _json_size(v) for k, v in report.mesh.items()}
    return json.dumps(data, indent=2)


class _StdoutClosed(Exception):
    """Standard output's reader went away (a BrokenPipeError writing the command's output)."""


@contextlib.contextmanager
def _writing_stdout() -> Iterator[None]:
    """Around the command's own output (help, version, usage, the report): writes what is
    buffered, and turns a closed pipe into _StdoutClosed, with standard output pointed at
    os.devnull so that the interpreter's last flush prints no 'Exception ignored ...
    BrokenPipeError' either. The user's code (importing the target, verify) runs outside, so a
    BrokenPipeError of its own is never taken for a closed standard output."""
    try:
        try:
            yield
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        try:
            if sys.stdout is None:
                raise ValueError("no standard output")
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file (io.UnsupportedOperation is an OSError)
            sys.stdout = open(os.devnull, "w")
        else:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)
        raise _StdoutClosed from None


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command with ``argv`` (default: ``sys.argv[1:]``) and returns its exit status;
    bad usage raises SystemExit(2) (argparse), ``--help`` and ``--version`` SystemExit(0), and a
    target or size that ``plan``/``verify`` reject returns 2 with their message on stderr."""
    try:
        return _main(argv)
    except _StdoutClosed:
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    with _writing_stdout():  # --help, --version and usage errors print here
        args = parser.parse_args(argv)
    if args.command == "search":
        return _search(parser, args)
    modes = args.mode or [None]
    rule_sets = _checked_usage(parser, args, modes)
    chip, links = getattr(args, "chip", None), getattr(args, "links", None)
    target = _load(args.target)
    if args.command == "plan":
        target = _plan_target(parser, args.target, target)
    inputs = _inputs(parser, target, getattr(args, "inputs", None))
    contexts = _rule_contexts(parser, args, rule_sets, modes)
    try:
        reports = _reports(args, target, inputs, contexts, chip, links)
    except (TypeError, ValueError) as e:
        # What plan() and verify() reject before they start (a target that is not an annotation
        # or a function, a bad size): bad usage, told in their words. Problems found in the
        # model itself are in the report instead.
        sys.stderr.write(f"shardtypes {args.command}: error: {args.target}: {e}\n")
        return 2
    failed = any(not r.ok or (args.command == "plan" and args.strict and bool(r.warnings)) for r in reports.values())
    heading = "rules" if len(rule_sets) > 1 else "mode"
    if args.html and not _wrote_html(args, reports, chip):
        return 2
    with _writing_stdout():
        _print_reports(args, reports, heading)
    return 1 if failed else 0


def _parser() -> argparse.ArgumentParser:
    """The command's parser: ``plan`` and ``verify``, their common options and their own."""
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="shardtypes",
        description="Plan and verify sharded JAX models from their shardtypes annotations, on an "
        "abstract mesh of any size, with no accelerator.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version of shardtypes and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{plan,verify,search}")
    common = _common_options()
    plan_cmd = commands.add_parser("plan", parents=[common], help="per-array layout and memory per device",
                                   description="One row per array: path, annotation, dtype, shape, "
                                   "PartitionSpec, per-device shape and bytes; totals and warnings.",
                                   epilog="examples:\n" + PLAN_EXAMPLES + TARGETS,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    plan_cmd.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    verify_cmd = commands.add_parser("verify", parents=[common], help="evaluate a checked function abstractly",
                                     description="Build abstract inputs from the function's annotations, "
                                     "evaluate it with jax.eval_shape with every check on, and report "
                                     "every problem.", epilog="examples:\n" + VERIFY_EXAMPLES + TARGETS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verify_cmd.add_argument("--static", type=lambda t: _pairs(t, ast.literal_eval), default={},
                            metavar="NAME=VALUE,...", help="values of non-array parameters (Python literals)")
    verify_cmd.add_argument("--inputs", action="append", metavar="NAME=MODULE:OBJECT",
                            help="a parameter given as a tree of values instead of built from its annotation "
                            "(an optax state: a tree of jax.ShapeDtypeStruct, or a callable of no arguments "
                            "returning one, such as a function calling jax.eval_shape); may repeat")
    verify_cmd.add_argument("--chip", type=_chip, metavar="KIND",
                            help="the step's time per device on this chip (" + ", ".join(DEVICE_KINDS) + "): a "
                            "lower bound from its cost at the chip's peak rates; see docs/chips.md")
    verify_cmd.add_argument("--links", type=lambda t: _pairs(t, str), metavar="AXIS=LINK,...",
                            help="the link each mesh axis runs over, one of the chip's (nvlink, network; ici, "
                            "dcn) or a bandwidth (50GB/s, 400Gb/s); default: the trailing axes that fit in a "
                            "node of 8 GPUs or a TPU slice over the fast link, the rest over the slow one")
    _search_parser(commands)
    return parser


def _search_parser(commands: Any) -> None:
    """``search``'s own options: devices and axes instead of a mesh, several rule sets."""
    cmd = commands.add_parser("search", help="rank mesh shapes and rule sets by the step's time on a chip",
                              description="Verify a checked step under every mesh shape of --devices over "
                              "--axes and every rule set of --rules, and rank them by the step's time per "
                              "device on --chip (a lower bound), those over --hbm marked.",
                              epilog="examples:\n" + SEARCH_EXAMPLES + TARGETS,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("target", metavar="MODULE:OBJECT", help="the checked step to lay out")
    cmd.add_argument("--devices", type=int, required=True, help="how many chips, e.g. 4096")
    cmd.add_argument("--axes", type=lambda t: [a.strip() for a in t.split(",")], required=True,
                     metavar="AXIS,...", help="the mesh axes to give sizes to, e.g. d,t")
    cmd.add_argument("--rules", action="append", required=True, metavar="[LABEL=]MODULE:OBJECT",
                     help="a rule set (AxisRules) to try; give it once per rule set")
    cmd.add_argument("--chip", type=_chip, required=True, metavar="KIND",
                     help="the chip to rank by (" + ", ".join(DEVICE_KINDS) + ")")
    cmd.add_argument("--hbm", type=_capacity, metavar="SIZE|KIND", help="device memory: layouts whose arguments "
                     "and activations do not fit are ranked last and marked")
    cmd.add_argument("--dims", type=lambda t: _pairs(t, _size), default={}, metavar="NAME=SIZE,...",
                     help="sizes of named dims, e.g. embed=8192,layers=80")
    cmd.add_argument("--static", type=lambda t: _pairs(t, ast.literal_eval), default={},
                     metavar="NAME=VALUE,...", help="values of non-array parameters (Python literals)")
    cmd.add_argument("--inputs", action="append", metavar="NAME=MODULE:OBJECT",
                     help="a parameter given as a tree of values (as verify's --inputs); may repeat")
    cmd.add_argument("--links", type=lambda t: _pairs(t, str), metavar="AXIS=LINK,...",
                     help="the link each mesh axis runs over (as verify's --links), for every mesh")
    cmd.add_argument("--auto", action="store_true", help="Auto mesh axes (XLA lays the step out) instead of Explicit")
    cmd.add_argument("--top", type=int, metavar="N", help="keep the best N layouts")
    cmd.add_argument("--json", action="store_true", help="print the ranking as JSON")
    cmd.add_argument("--html", metavar="FILE", help="also write the best three side by side as a page")


def _search(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``shardtypes search``: the ranking on stdout (exit 0), 1 where no layout fits ``--hbm``,
    2 for bad usage (a rule set under which the step fails on every mesh included)."""
    try:
        rule_sets = {label: _load(where) for label, where in _rules_targets(args.rules).items()}
    except ValueError as e:
        parser.error(str(e))
    for label, rules in rule_sets.items():
        if not isinstance(rules, AxisRules):
            parser.error(f"--rules {label}: expected AxisRules, found {type(rules).__name__}")
    if args.html and not os.path.isdir(os.path.dirname(os.path.abspath(args.html))):
        parser.error(f"--html {args.html}: no such directory")
    target = _load(args.target)
    inputs = _inputs(parser, target, args.inputs)
    try:
        with progress(f"shardtypes search: verifying {args.target} under each layout"):
            found = search(target, args.devices, args.dims, axes=args.axes, rules=rule_sets, chip=args.chip,
                           hbm=args.hbm, inputs=inputs, static=args.static, top=args.top, links=args.links,
                           axis_types="auto" if args.auto else "explicit")
    except (TypeError, ValueError) as e:
        sys.stderr.write(f"shardtypes search: error: {args.target}: {e}\n")
        return 2
    if args.html and found.candidates:
        page = found.to_html()
        try:
            write_html(args.html, page, "shardtypes search: --html")
        except OSError as e:
            sys.stderr.write(f"{e}\n")
            return 2
        sys.stderr.write(f"shardtypes search: wrote {args.html} ({len(page.encode()) / 1024:.0f} KiB)\n")
    with _writing_stdout():
        print(found.to_json() if args.json else found)
    return 0 if found.best is not None else 1


def _common_options() -> argparse.ArgumentParser:
    """The options ``plan`` and ``verify`` share: the target, the mesh, sizes, rules and output."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("target", metavar="MODULE:OBJECT", help="what to plan or verify")
    common.add_argument("--mesh", type=_mesh, required=True, metavar="AXIS=SIZE,...",
                        help="the abstract mesh, e.g. d=64,t=64 (Explicit axes)")
    common.add_argument("--dims", type=lambda t: _pairs(t, _size), default={},
                        metavar="NAME=SIZE,...", help="sizes of named dims, e.g. embed=8192,layers=80")
    common.add_argument("--rules", action="append", metavar="[LABEL=]MODULE:OBJECT",
                        help="AxisRules to resolve logical axis names; give it several times to compare the "
                        "layouts the rule sets choose side by side (labelled LABEL, or OBJECT)")
    common.add_argument("--mode", action="append", help="the rules' mode (e.g. decode); for plan, give it "
                        "several times to compare modes side by side ('default': the rules without a mode)")
    common.add_argument("--json", action="store_true", help="print the report as JSON")
    common.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the memory bar: auto (a terminal, or FORCE_COLOR set; never with NO_COLOR), "
                        "always or never; JSON is never coloured")
    common.add_argument("--max-replicated", type=_share, metavar="SHARE",
                        help="a problem (exit 1) when more than this share of the memory per device "
                        "is replicated copies, e.g. 5%% (or 0.05); for verify, of the function's arguments")
    common.add_argument("--html", metavar="FILE", help="also write the report as a self-contained HTML page")
    common.add_argument("--hbm", type=_capacity, metavar="SIZE|KIND",
                        help="device memory: 80GiB, or a kind (" + ", ".join(DEVICE_KINDS) + "); the page's bar is "
                        "drawn against it, and verify reports a problem when the arguments and the step's "
                        "activations do not fit")
    return common


def _checked_usage(parser: argparse.ArgumentParser, args: argparse.Namespace, modes: list) -> dict[str, str]:
    """The rule sets ``--rules`` names (label -> MODULE:OBJECT), after the options that do not
    go together are refused as bad usage (exit 2): several modes with verify or with several rule
    sets, a mode twice, ``--html`` into no folder, ``--links`` without ``--chip`` or that do not
    fit the mesh."""
    try:
        rule_sets = _rules_targets(args.rules)
    except ValueError as e:
        parser.error(str(e))
    if len(modes) > 1 and args.command == "verify":
        parser.error("--mode: verify takes one mode (plan compares several)")
    if len(modes) > 1 and len(rule_sets) > 1:
        parser.error("--mode: with --rules given several times (rule sets compared), give one mode")
    if len(set(modes)) < len(modes):
        parser.error(f"--mode: a mode is given twice in {modes}")
    if args.html and not os.path.isdir(os.path.dirname(os.path.abspath(args.html))):
        parser.error(f"--html {args.html}: no such directory")
    chip, links = getattr(args, "chip", None), getattr(args, "links", None)
    if links is not None and chip is None:
        parser.error("--links needs --chip")
    if chip is not None:
        try:
            axis_links(args.mesh, chip, links, chip_option="--chip", links_option="--links")
        except ValueError as e:
            parser.error(str(e))
    return rule_sets


def _rule_contexts(parser: argparse.ArgumentParser, args: argparse.Namespace, rule_sets: dict[str, str],
                   modes: list) -> dict[Any, Any]:
    """The contexts to plan or verify under, by the label the report gets: each rule set (or
    mode of one) as an ``axis_rules`` context; without ``--rules``, one context whose errors say
    how to give them."""
    if rule_sets:
        contexts: dict[Any, Any] = {}
        for label, where in rule_sets.items():
            rules = _load(where)
            if not isinstance(rules, AxisRules):
                parser.error(f"--rules {where}: expected AxisRules, found {type(rules).__name__}")
            for mode in modes:
                if mode is not None and mode != "default" and mode not in rules.modes:
                    parser.error(f"--mode {mode!r}: {where} has modes {sorted(rules.modes) or 'none'} (and 'default')")
            for m in modes:
                context = axis_rules(rules, mode=None if m == "default" and m not in rules.modes else m)
                contexts[label if len(rule_sets) > 1 else m] = context
        return contexts
    if args.mode:
        parser.error("--mode needs --rules")
    # a name that is not a mesh axis may be a logical one: say how to give rules here
    return {None: _rules_hint("pass --rules MODULE:OBJECT (an AxisRules defined in your module)")}


def _reports(args: argparse.Namespace, target: Any, inputs: dict[str, Any] | None, contexts: dict[Any, Any],
             chip: str | None, links: dict[str, str] | None) -> dict[Any, Any]:
    """The plan or verify report of ``target`` under each context, by its label."""
    reports: dict[Any, Any] = {}
    for mode, context in contexts.items():
        with context:
            if args.command == "plan":
                reports[mode] = plan(target, args.mesh, args.dims, max_replicated=args.max_replicated)
            else:
                with progress(f"shardtypes verify: tracing {args.target}"):  # shown after 1 s
                    reports[mode] = verify(target, args.mesh, args.dims, static=args.static,
                                           inputs=inputs, max_replicated=args.max_replicated, hbm=args.hbm,
                                           chip=chip, links=links)
    return reports


def _wrote_html(args: argparse.Namespace, reports: dict[Any, Any], chip: str | None) -> bool:
    """Writes the reports' page to ``--html`` (side by side where there are several) and says so
    on stderr; False, with the reason on stderr, where it cannot be written."""
    report = next(iter(reports.values()))
    page = (plan_html({str(m): r for m, r in reports.items()}, args.hbm or chip) if len(reports) > 1
            else report.to_html(args.hbm or chip))
    try:
        write_html(args.html, page, f"shardtypes {args.command}: --html")
    except OSError as e:
        sys.stderr.write(f"{e}\n")
        return False
    sys.stderr.write(f"shardtypes {args.command}: wrote {args.html} ({len(page.encode()) / 1024:.0f} KiB)\n")
    return True


def _print_reports(args: argparse.Namespace, reports: dict[Any, Any], heading: str) -> None:
    """The reports on stdout: text or JSON, several under their labels with their step times
    side by side; for plan, each one's memory bar and largest arrays."""
    if len(reports) == 1:
        print(_to_json(next(iter(reports.values()))) if args.json else next(iter(reports.values())))
    elif args.json:
        print(json.dumps({m: json.loads(_to_json(r)) for m, r in reports.items()}, indent=2))
    else:
        print("\n\n".join(f"{heading} {m}:\n{r}" for m, r in reports.items()))
        times = {m: r.step_time for m, r in reports.items() if getattr(r, "step_time", None) is not None}
        if len(times) > 1:
            print(_compare_times(times))
    if args.command == "plan" and not args.json:  # the memory bar and the largest arrays
        capacity = parse_capacity(args.hbm, "--hbm") if args.hbm else None
        colour = use_colour(sys.stdout, args.color)
        for m, r in reports.items():
            title = f"\n{heading} {m}:" if len(reports) > 1 else ""
            print(f"{title}\n{render(plan_lines(r, capacity), colour)}")


def _compare_times(times: dict) -> str:
    """Step times side by side, fastest (by the lower bound) first."""
    width = max(len(str(m)) for m in times)
    chips = ", ".join(dict.fromkeys(t.chip for t in times.values()))
    lines = [f"\nstep time on {chips}, a lower bound per device (perfect overlap / none):"]
    for m, t in sorted(times.items(), key=lambda kv: kv[1].perfect_overlap):
        lines.append(f"  {str(m):{width}s}  {fmt_seconds(t.perfect_overlap):>9s} / {fmt_seconds(t.no_overlap):<9s}"
                     f"  bound by {t.bound}")
    return "\n".join(lines)


@contextlib.contextmanager
def _rules_hint(text: str) -> Iterator[None]:
    token = RULES_HINT.set(text)
    try:
        yield
    finally:
        RULES_HINT.reset(token)


if __name__ == "__main__":
    sys.exit(main())
