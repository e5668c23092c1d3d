"""Errors with a way out (issue 35, item 4): each family of error shardtypes raises ends its message
with the docs section that explains it, ``See https://shardtypes.github.io/shardtypes/<page>/#<anchor>``,
once, however it travels (re-raised, wrapped in a check, collected by ``verify``, pickled).

The sections are held to the docs: each anchor is a heading of its page, made as mkdocs' default
``toc`` makes it. The catalogue's bad inputs (tests/package/test_catalogue.py) all carry a link but
``NO_LINK``'s classes: a ``TypeError`` or ``ValueError`` about an argument of the API names the
argument and what is accepted, which is its way out (docs/checking.md, "Reading an error message").
"""

from __future__ import annotations

import copy
import importlib
import pickle
import re
import sys
import unicodedata
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardtypes
from shardtypes import (
    ArrayError,
    AxisRules,
    AxisRulesError,
    FieldError,
    ShapeSpec,
    ShapeSpecError,
    TypeCheckError,
    axis_rules,
    check,
    f32,
    make_shardings,
    ops,
    pytree_dataclass,
    typechecked,
    typed_shard_map,
    verify,
)
from shardtypes.language import (
    AXIS_RULES,
    CHECK_FAILED,
    COMPILE_TIME,
    DOCS_URL,
    FAMILIES,
    FIELD_FAILED,
    INVARIANT_GATHER,
    KERNEL_OPS,
    KERNEL_PASS,
    MALFORMED,
    MESH_MISMATCH,
    SHAPE_STRING,
    VERIFY_PROBLEMS,
    DocLink,
    linked,
    unlinked,
)
from shardtypes.language.sizes import DimError
from shardtypes.testing import MeshMismatch, assert_same_on_every_mesh

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"See " + re.escape(DOCS_URL) + r"\S*")


def links(text: str) -> list[str]:
    return LINK.findall(text)


def assert_ends_with(error: BaseException, link: DocLink) -> None:
    text = str(error)
    assert text.endswith("\n" + link.line), f"not ending with {link.line}:\n{text}"
    assert links(text) == [link.line], text


def raised(call: Callable[[], Any], cls: type[BaseException] = Exception) -> BaseException:
    with pytest.raises(cls) as info:
        call()
    return info.value


# ---------------------------------------------------------------------------------------------
# The sections exist.


def slugify(heading: str) -> str:
    """A heading's anchor as mkdocs' default ``toc`` makes it: the rendered text (code spans keep
    their words, markup goes), ASCII, lower case, punctuation dropped, spaces as ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: str) -> set[str]:
    """The anchors of docs/<page>.md's headings (not of ``#`` lines inside fenced code)."""
    found: set[str] = set()
    fenced = False
    for line in (ROOT / "docs" / f"{page}.md").read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            slug = slugify(m.group(1))
            n, unique = 0, slug
            while unique in found:  # a repeated heading: toc adds _1, _2
                n += 1
                unique = f"{slug}_{n}"
            found.add(unique)
    return found


def test_the_base_url_is_the_docs_site() -> None:
    site = re.search(r"^site_url:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert site is not None and site.group(1) == DOCS_URL


def test_the_slugs_are_mkdocs_slugs() -> None:
    assert slugify("Expressions: `seq+1`, `2*d_model`, `heads//kv`") == "expressions-seq1-2d_model-headskv"
    assert slugify("`jax.jit` on Auto axes") == "jaxjit-on-auto-axes"
    assert slugify("Returning a gathered value: `invariant=True`") == "returning-a-gathered-value-invarianttrue"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_links_to_a_heading_of_a_page_in_the_nav(name: str) -> None:
    link = FAMILIES[name]
    assert f"{link.page}.md" in (ROOT / "mkdocs.yml").read_text()
    assert link.anchor in anchors(link.page), (link, sorted(anchors(link.page)))
    assert link.url == f"{DOCS_URL}{link.page}/#{link.anchor}"


# ---------------------------------------------------------------------------------------------
# linked: one link, the last line.


def test_linked_appends_once_and_keeps_the_first_link_at_the_end() -> None:
    once = linked("bad", CHECK_FAILED)
    assert once == f"bad\n{CHECK_FAILED.line}"
    assert linked(once, CHECK_FAILED) == once
    assert linked(once, AXIS_RULES) == once  # the error that said it first keeps its section
    inside = f"in f(): {once} (found float32[3])"  # another error's text inside a message
    assert linked(inside, AXIS_RULES) == f"in f(): bad (found float32[3])\n{CHECK_FAILED.line}"
    assert unlinked(once) == "bad"
    assert unlinked("no link here") == "no link here"


# ---------------------------------------------------------------------------------------------
# Each family, raised through the public API.


MESH = jax.make_mesh((4, 2), ("d", "t"))


def X() -> jax.Array:
    return jnp.zeros((8, 4), jnp.float32)


@pytree_dataclass
class Layer:
    w_up: f32[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]


@typechecked
def step(x: f32[b"batch/d embed"], layer: Layer) -> f32[b"batch/d embed"]:
    return x


@typechecked
def inner(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
    return x[:, :1]


@typechecked
def outer(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
    return inner(x)


@typechecked
def pair(x: f32[b"a b"]) -> tuple[f32[b"a b"], f32[b"a b"]]:
    return x  # type: ignore[return-value]


def kernel(f: Callable[..., Any], *args: jax.Array, jit: bool = False, **options: Any) -> Any:
    with jax.set_mesh(MESH):
        mapped = typed_shard_map(f, **options)
        return (jax.jit(mapped) if jit else mapped)(*args)


def x_split() -> jax.Array:
    return jax.device_put(jnp.ones((8, 8)), NamedSharding(MESH, P(None, "t")))


def w_split() -> jax.Array:
    return jax.device_put(jnp.ones((8, 8)), NamedSharding(MESH, P("t")))


def sum_not_paid(x: f32[b"b f/t"], w: f32[b"f/t m"]) -> f32[b"b m"]:
    return jnp.einsum("bf,fm->bm", x, w)  # a partial sum over 't', returned unpaid


def ops_operand(x: f32[b"b m"]) -> f32[b"b m"]:
    return ops.psum("b", x, "t")  # the operand has two dims, the spec one


def tanh_psum(x: f32[b"b f/t"], w: f32[b"f/t m"]) -> f32[b"b m"]:
    return ops.psum("b m", jnp.tanh(ops.einsum_unreduced("b f/t, f/t m -> b m", x, w)), "t")


def gather_vma_off(x: f32[b"a/d"]) -> f32[b"a"]:
    return ops.all_gather("a/d -> a", x, invariant=True)


@typechecked
def scaled(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
    return x * 2.0


def compile_time() -> Any:
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("d", "t"))  # Auto axes
    with jax.set_mesh(mesh):
        x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(None, "d")))
        return jax.jit(scaled)(x)


RULES = AxisRules([("batch", "d"), ("embed", "t")], modes={"decode": [("batch", None)]}, name="cat")


def rules_in_a_check() -> Any:
    x = jax.device_put(jnp.zeros((8, 4)), NamedSharding(MESH, P("d")))
    with axis_rules(AxisRules([("rows", "d")], name="mine")):
        check(f32, "a/rows b/cols", x)


# (family, the call that raises, the class it raises)
RAISES: dict[str, tuple[DocLink, Callable[[], Any], type[BaseException]]] = {
    "ShapeSpecError": (SHAPE_STRING, lambda: ShapeSpec.parse("a/ b"), ShapeSpecError),
    "ShapeSpecError-size-expression": (SHAPE_STRING, lambda: ShapeSpec.parse("x//"), ShapeSpecError),
    "ShapeSpecError-annotation": (SHAPE_STRING, lambda: f32[b"batch/d/d"], ShapeSpecError),
    "ArrayError": (CHECK_FAILED, lambda: typeguard.check_type(X(), f32[b"a"]), ArrayError),
    "check": (CHECK_FAILED, lambda: check(f32, "a", X()), TypeCheckError),
    "typechecked": (CHECK_FAILED, lambda: inner(jnp.zeros((8,))), TypeCheckError),
    "typechecked-nested": (CHECK_FAILED, lambda: outer(jnp.zeros((8, 4))), TypeCheckError),
    "typeguard-own-failure": (CHECK_FAILED, lambda: pair(jnp.zeros((2, 3))), TypeCheckError),
    "FieldError": (FIELD_FAILED, lambda: typeguard.check_type(Layer(jnp.zeros((2, 3)), jnp.zeros((4, 2))), Layer),
                   FieldError),
    "AxisRulesError-mode": (AXIS_RULES, lambda: RULES.table("prefill"), AxisRulesError),
    "AxisRulesError-merge": (AXIS_RULES, lambda: RULES + AxisRules([("batch", "t")]), AxisRulesError),
    "AxisRulesError-rewrapped": (AXIS_RULES, lambda: rules_in_a_check(), TypeCheckError),
    "AxisRulesError-layout": (AXIS_RULES, lambda: _unknown_rule(), AxisRulesError),
    "kernel-pass": (KERNEL_PASS, lambda: kernel(sum_not_paid, x_split(), w_split()), TypeCheckError),
    "kernel-unreduced": (KERNEL_PASS, lambda: kernel(tanh_psum, x_split(), w_split(), jit=True), TypeCheckError),
    "kernel-ops": (KERNEL_OPS, lambda: kernel(ops_operand, jnp.ones((8, 8))), TypeCheckError),
    "invariant-gather": (INVARIANT_GATHER, lambda: kernel(gather_vma_off, jax.device_put(
        jnp.zeros((8,)), NamedSharding(MESH, P("d"))), check_vma=False), TypeCheckError),
    "compile-time": (COMPILE_TIME, compile_time, TypeCheckError),
    "malformed": (MALFORMED, lambda: typeguard.check_type(X(), f32), TypeCheckError),
    "typechecked-argument": (CHECK_FAILED, lambda: step(jnp.zeros((8, 4)), X()), TypeCheckError),
    "MeshMismatch": (MESH_MISMATCH, lambda: assert_same_on_every_mesh(sum_for_mean), MeshMismatch),
    "VerificationError": (VERIFY_PROBLEMS, lambda: verify(step, {"d": 4, "t": 2}, dims={"batch": 8, "embed": 3},
                                                          raise_on_error=True), TypeCheckError),
}


def sum_for_mean_body(x: f32[b"batch/d embed"]) -> f32[b"embed"]:
    return jax.lax.psum(x.mean(0), "d")  # a mean of the local rows, summed over 'd'


sum_for_mean = typed_shard_map(sum_for_mean_body)


def _unknown_rule() -> Any:
    with axis_rules(AxisRules([("x", "d")])):
        make_shardings(f32[b"rows/x cols/y"], MESH)


def test_every_family_is_raised_here() -> None:
    assert {link for link, _, _ in RAISES.values()} == set(FAMILIES.values())


@pytest.mark.parametrize("name", sorted(RAISES))
def test_the_message_ends_with_its_link_once(name: str) -> None:
    link, call, cls = RAISES[name]
    error = raised(call, cls)
    assert_ends_with(error, link)


@pytest.mark.parametrize("name", sorted(RAISES))
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "reraise"])
def test_the_link_stays_once(name: str, how: str) -> None:
    link, call, cls = RAISES[name]
    error = raised(call, cls)
    if how == "pickle":
        back = pickle.loads(pickle.dumps(error))
    elif how == "deepcopy":
        back = copy.deepcopy(error)
    else:
        def again() -> None:
            try:
                raise error
            except Exception:
                raise
        back = raised(again)
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert_ends_with(back, link)


def test_a_dim_error_has_the_shape_string_link_and_the_shape_spec_error_says_it_once() -> None:
    assert_ends_with(DimError("dim 'a/' has an empty mesh axis name"), SHAPE_STRING)
    error = raised(lambda: ShapeSpec.parse("a x//"), ShapeSpecError)
    assert isinstance(error, ShapeSpecError)
    assert error.problem == "dim 1: size expression 'x//' ends where an operand was expected"
    assert str(error).splitlines()[:3] == ["invalid shape string 'a x//': " + error.problem, "    'a x//'",
                                           "       ^^^"]


def test_a_rules_error_inside_a_check_keeps_the_rules_section() -> None:
    error = raised(rules_in_a_check, TypeCheckError)
    assert str(error).startswith("check(): value is not f32[b'a/rows b/cols']: ")
    assert_ends_with(error, AXIS_RULES)


def test_verify_collects_problems_without_links_and_its_error_has_one() -> None:
    report = verify(step, {"d": 4, "t": 2}, dims={"batch": 8, "embed": 3})
    assert not report.ok and report.problems
    assert all(not links(p.message) for p in report.problems), report.problems
    assert not links(str(report)) and not links(report.to_json())
    error = raised(lambda: verify(step, {"d": 4, "t": 2}, dims={"batch": 8, "embed": 3}, raise_on_error=True),
                   TypeCheckError)
    assert str(error) == f"{error.report}\n{VERIFY_PROBLEMS.line}"


def test_an_exception_class_of_the_package_is_in_a_family_or_has_no_link_for_a_reason() -> None:
    """The classes users meet carry a link; the internal ones (caught inside the package before a
    user sees them) are listed with why."""
    internal = {"Mismatch": "becomes a check's TypeCheckError", "Unreadable": "the kernel pass steps aside (a warning)",
                "_Unresolved": "a hint that cannot be resolved: a TypeError naming it",
                "_StdoutClosed": "the command's output pipe closed: no message",
                "ShardtypesWarning": "a warning", "KernelPassWarning": "a warning", "JaxFeatureWarning": "a warning"}
    linked_classes = {"ShapeSpecError", "DimError", "ArrayError", "FieldError", "AxisRulesError", "VerificationError",
                      "MeshMismatch"}
    found = set()
    for name in list(sys.modules):
        module = sys.modules[name]
        if name.startswith("shardtypes") and module is not None:
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, BaseException)
                        and value.__module__.startswith("shardtypes")):
                    found.add(value.__name__)
    assert found <= linked_classes | set(internal), found - linked_classes - set(internal)


# ---------------------------------------------------------------------------------------------
# The catalogue's errors.


# The classes whose errors carry no link, and why: an argument of the API given a wrong type or
# value (TypeError, ValueError), or the API used out of order (RuntimeError: a Scope exited out of
# order), names the argument or the call and what is accepted, which is its way out; an unknown
# setting of shardtypes.config is Python's AttributeError; the command's usage errors print
# argparse's usage (the catalogue's CLIFailed holds the status and output). A link inside one (the
# message quotes an error that has one) is still said once.
NO_LINK = (TypeError, ValueError, RuntimeError, AttributeError)


def catalogue_cases() -> list[Any]:
    """The cases of every catalogue module in tests/package (the catalogue may be split in files)."""
    cases: dict[str, Any] = {}
    for path in sorted(Path(__file__).parent.glob("*catalogue*.py")):
        module = importlib.import_module(path.stem)
        for c in getattr(module, "CASES", []):
            cases.setdefault(f"{c.entry}:{c.id}", c)
    return list(cases.values())


def test_the_catalogue_errors_carry_their_link() -> None:
    saved = (shardtypes.config.checks, shardtypes.config.auto_sharding_check)
    cases = [c for c in catalogue_cases() if not c.xfail]
    assert len(cases) >= 200
    wrong, with_link, without = [], set(), set()
    for c in cases:
        try:
            c.call()
        except Exception as e:  # every case raises: the catalogue's own test says which class
            error = e
        else:
            continue
        finally:
            shardtypes.config.checks, shardtypes.config.auto_sharding_check = saved
        text, name = str(error), f"{c.entry}:{c.id}"
        found = links(text)
        if len(found) > 1:
            wrong.append(f"{name}: {len(found)} links: {text}")
        elif isinstance(error, (ShapeSpecError, AxisRulesError, TypeCheckError)):
            if not (found and text.endswith("\n" + found[0])):
                wrong.append(f"{name}: {type(error).__name__} without its link at the end: {text}")
            with_link.add(type(error).__name__)
        elif isinstance(error, NO_LINK) or type(error).__name__ == "CLIFailed":
            without.add(type(error).__name__)
        else:
            wrong.append(f"{name}: {type(error).__name__} in no family: {text}")
    assert not wrong, "\n".join(wrong)
    assert {"ShapeSpecError", "AxisRulesError", "TypeCheckError", "ArrayError"} <= with_link, with_link
    assert {"TypeError", "ValueError"} <= without, without
