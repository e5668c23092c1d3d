"""The kernel pass never breaks a correct program (checking/kernel_pass/jaxpr.py): a primitive it has no
rule for, or params in a shape it does not know (as a future JAX release may give), make what
that equation computes unknown, with one KernelPassWarning naming the primitive and the JAX
version, and the kernel runs with the right numbers. Also ``ops.per_device``'s input checks."""

import re
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import Primitive
from jax.interpreters import mlir

import shardtypes
from shardtypes import KernelPassWarning, TypeCheckError, f32, ops, typed_shard_map
from shardtypes.checking.kernel_pass import jaxpr as kernel_jax

from conftest import make_mesh, put


def _primitive(name: str) -> Primitive:
    """A primitive called ``name`` computing ``2 * x``, with params of a shape no JAX gives."""
    prim = Primitive(name)
    prim.def_impl(lambda x, **params: 2 * x)
    prim.def_abstract_eval(lambda x, **params: jax.core.ShapedArray(x.shape, x.dtype))
    mlir.register_lowering(prim, mlir.lower_fun(lambda x, **params: 2 * x, multiple_results=False))
    return prim


# Named like JAX's own primitives, whose params the pass reads; and one it has no rule for.
FUTURE_SCAN = _primitive("scan")
FUTURE_GATHER = _primitive("all_gather")
MYSTERY = _primitive("shardtypes_test_mystery")
X = np.arange(32, dtype=np.float32).reshape(8, 4)


@pytest.fixture(autouse=True)
def _fresh_warnings():
    kernel_jax.reset_warnings()
    yield
    kernel_jax.reset_warnings()


def future(x: f32[b"batch/d feat"]) -> f32[b"batch/d feat"]:
    y = FUTURE_SCAN.bind(x, ft_in_v2=("consts", "carry"), layout="v2")
    return FUTURE_GATHER.bind(y, axes_v3=(("d", 0),)) + 1.0


def mystery(x: f32[b"batch/d feat"]) -> f32[b"batch/d feat"]:
    return MYSTERY.bind(MYSTERY.bind(x, knob=1), knob=2) - 1.0


@pytest.mark.parametrize("kind", ["explicit", "auto"])
@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
def test_params_the_pass_cannot_read_leave_the_kernel_running_with_one_warning_each(kind, jitted):
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        kernel = partial(typed_shard_map, check_vma=False)(future)
        run = jax.jit(kernel) if jitted else kernel
        with pytest.warns(KernelPassWarning) as seen:
            out = run(put(mesh, X, "d"))
            run(put(mesh, X + 1, "d"))  # (traced again eagerly: each warning is said once)
        np.testing.assert_allclose(np.asarray(out), 4 * X + 1)
    texts = [str(w.message) for w in seen]
    assert len(texts) == 2, texts
    version = jax.__version__.replace(".", r"\.")
    assert any(__import__("re").search(rf"cannot follow JAX's 'scan' here \(its params: .*; JAX {version}\)", t)
               for t in texts), texts
    assert any("cannot follow JAX's 'all_gather' here" in t for t in texts), texts
    assert all("the checks at the kernel's boundary still run" in t for t in texts)


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_a_primitive_without_a_rule_is_unknown_with_one_warning(kind):
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        kernel = jax.jit(partial(typed_shard_map, check_vma=False)(mystery))
        with pytest.warns(KernelPassWarning, match=r"cannot follow JAX's 'shardtypes_test_mystery' here \(no rule "
                          r"for this primitive; JAX .*\): what it computes is taken as unknown") as seen:
            out = kernel(put(mesh, X, "d"))
        np.testing.assert_allclose(np.asarray(out), 4 * X - 1)
    assert len([w for w in seen if issubclass(w.category, KernelPassWarning)]) == 1


def test_the_boundary_checks_still_run_after_the_pass_steps_aside():
    mesh = make_mesh("explicit")

    def wrong_return(x: f32[b"batch/d feat"]) -> f32[b"batch/d feat feat"]:
        return MYSTERY.bind(x, knob=1)

    with jax.set_mesh(mesh):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", KernelPassWarning)
            with pytest.raises(TypeCheckError, match=r"wrong_return\(\) is not f32\[b'batch/d feat feat'\]"):
                jax.jit(partial(typed_shard_map, check_vma=False)(wrong_return))(put(mesh, X, "d"))


def test_scan_groups_reads_the_installed_jax():
    """On 0.9/0.10 (num_consts, num_carry) and on 0.11 (ft_in) alike."""
    def f(c, xs, k):
        return jax.lax.scan(lambda carry, x: (carry + x * k, carry), c, xs)

    jaxpr = jax.make_jaxpr(f)(jnp.ones(3), jnp.ones((5, 3)), jnp.ones(3))
    (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    consts, carries = kernel_jax.scan_groups(eqn)
    assert carries == 1 and consts + carries + 1 == len(eqn.invars)


def test_scan_groups_refuses_params_it_does_not_know():
    class Eqn:
        params = {"ft_in": object(), "length": 3}
        invars = [1, 2, 3]

    with pytest.raises(kernel_jax.Unreadable, match="no num_consts/num_carry, and no ft_in of three groups"):
        kernel_jax.scan_groups(Eqn())
    with pytest.raises(kernel_jax.Unreadable, match="no param 'cond_nconsts'"):
        kernel_jax.while_groups(Eqn())


def test_kernel_pass_warning_is_public_and_a_user_warning():
    assert shardtypes.KernelPassWarning is KernelPassWarning
    assert issubclass(KernelPassWarning, UserWarning)


# -- ops.per_device: bad input ---------------------------------------------------------------


def test_per_device_outside_a_kernel_says_so():
    with pytest.raises(ValueError, match=r"shardtypes.ops.per_device.*no shard_map is running here"):
        ops.per_device(jnp.ones(3), "d")


@pytest.mark.parametrize("axes,error,message", [
    (3, TypeError, r"argument 'axes' must be a mesh axis name or a non-empty tuple of them, not 3"),
    ((), TypeError, r"argument 'axes' must be a mesh axis name"),
    (("d", "d"), ValueError, r"argument 'axes' names a mesh axis twice"),
    ("nope", ValueError, r"mesh axis 'nope' is not in the mesh"),
])
def test_per_device_validates_its_axes(axes, error, message):
    mesh = make_mesh("explicit")

    def k(x: f32[b"batch/d feat"]) -> f32[b"batch/d feat"]:
        return ops.per_device(x, axes)

    with jax.set_mesh(mesh):
        with pytest.raises(error, match=message):
            typed_shard_map(k)(put(mesh, X, "d"))


def test_per_device_takes_arrays_only():
    mesh = make_mesh("explicit")

    def k(x: f32[b"batch/d feat"]) -> f32[b"batch/d feat"]:
        ops.per_device({"a": 1.0}, "d")
        return x

    with jax.set_mesh(mesh):
        with pytest.raises(TypeError, match=r"per_device: argument 'value' must be a jax.Array or a tree of them "
                           r"\(found float\)"):
            typed_shard_map(k)(put(mesh, X, "d"))


def test_per_device_returns_its_argument_and_a_tree():
    mesh = make_mesh("auto")

    def k(x: f32[b"batch/d feat"]) -> f32[b"batch/d feat"]:
        tree = {"s": x.sum(0), "m": x.max(0)}
        assert ops.per_device(tree, "d") is tree
        return x * jax.lax.pmean(tree["s"] + tree["m"], "d")

    with jax.set_mesh(mesh):
        out = jax.jit(typed_shard_map(k))(put(mesh, X, "d"))
    per_block = [X[i:i + 2].sum(0) + X[i:i + 2].max(0) for i in range(0, 8, 2)]
    np.testing.assert_allclose(np.asarray(out), X * np.mean(per_block, axis=0), rtol=1e-6)


# An attribute read of JAX's equations or jaxprs (not a call of the adapter, ``jaxprs.invars(...)``),
# or an import of JAX's core modules.
READS = re.compile(r"(?<!jaxprs)\.(params|aval|primitive|val|invars|outvars|eqns|constvars)\b"
                   r"|jax\.extend\.core|jax\.core\b|\bjex\b")


def test_only_the_adapter_reads_jax_equations():
    """docs/design.md: every read of JAX's primitives, their params, their values' avals and a jaxpr's
    equations, inputs and outputs goes through checking/kernel_pass/jaxpr.py (which knows each
    release's shape of them), the only module of the pass (and of the activation estimate) that
    imports jax.extend.core or jax.core; the others ask it."""
    import pathlib

    package = pathlib.Path(shardtypes.__file__).parent
    reads = READS
    files = [*sorted((package / "checking" / "kernel_pass").glob("*.py")),
             package / "tools" / "activations.py", package / "tools" / "activation_rules.py",
             package / "tools" / "step_cost.py"]
    found = [f"{path.name}:{n}: {line.strip()}"
             for path in files if path.name not in ("jaxpr.py", "__init__.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if reads.search(line.split("#")[0]) and not line.lstrip().startswith(("\"", "'", "*", "``"))]
    assert found == [], "\n".join(found)


def test_the_door_check_sees_each_kind_of_read(tmp_path):
    """The check above finds each kind of read it names (so that it cannot pass by missing them),
    and not the adapter's own calls."""
    reads = READS
    for line in ("x = eqn.params['axes']", "v.aval.shape", "eqn.primitive.name", "lit.val", "eqn.invars[0]",
                 "eqn.outvars", "for e in jaxpr.eqns:", "jaxpr.constvars", "import jax.extend.core as jex",
                 "from jax.core import Tracer", "isinstance(v, jex.Var)"):
        assert reads.search(line), line
    assert not reads.search("ins = jaxprs.invars(jaxpr)") and not reads.search("jaxprs.aval(v)")


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_a_psum_of_a_python_literal_is_the_axis_size_and_of_an_invariant_value_an_error(kind):
    mesh = make_mesh(kind)

    def size(x: f32[b"batch/d feat"]) -> f32[b"batch/d feat"]:
        return x * jax.lax.psum(1, "d")  # the axis size, the same on every device

    def twice(x: f32[b"batch/d feat"]) -> f32[b"feat"]:
        return jax.lax.psum(jax.lax.psum(x.sum(0), "d"), "d")

    with jax.set_mesh(mesh):
        out = jax.jit(partial(typed_shard_map, check_vma=False)(size))(put(mesh, X, "d"))
        np.testing.assert_allclose(np.asarray(out), 4 * X)
        with pytest.raises(TypeCheckError, match=r"a psum \(or psum_scatter\) over mesh axis 'd' added up a value that is already the "
                           r"same on every device along it .*counting it once per device"):
            jax.jit(partial(typed_shard_map, check_vma=False)(twice))(put(mesh, X, "d"))


# Keeps its operand's aval, so JAX (check_vma on) types its result varying as the operand is.
TYPED_MYSTERY = Primitive("shardtypes_test_typed_mystery")
TYPED_MYSTERY.def_impl(lambda x: 2 * x)
TYPED_MYSTERY.def_abstract_eval(lambda x: x)
mlir.register_lowering(TYPED_MYSTERY, mlir.lower_fun(lambda x: 2 * x, multiple_results=False))


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_where_the_pass_steps_aside_jax_s_varying_check_still_speaks(kind):
    """The pass cannot follow the primitive, so it does not know what ``y`` varies over; JAX's
    own varying type (check_vma on) still refuses a replicated annotation, said by the pass."""
    mesh = make_mesh(kind)

    def k(x: f32[b"batch/d feat"]) -> f32[b"feat"]:
        y: f32[b"_ feat"] = TYPED_MYSTERY.bind(x)
        return y[0]

    with jax.set_mesh(mesh):
        with pytest.warns(KernelPassWarning, match="shardtypes_test_typed_mystery"):
            with pytest.raises(TypeCheckError, match=r"in kernel .*k\(\), the value assigned to y of .*k\(\), annotated "
                               r"f32\[b'_ feat'\]: it varies over manual mesh axis 'd' \(jax.typeof gives"):
                jax.jit(typed_shard_map(k))(put(mesh, X, "d"))
