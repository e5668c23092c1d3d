"""The pass over a kernel body's jaxpr (checking/kernel_pass/): layouts follow values through
the user's own ``jnp`` code, and partial sums are followed with ``check_vma`` on or off, eagerly
or under ``jax.jit`` (issue 17, items 1 and 2).

Every case runs on a 2x2 mesh, where two mesh axes have the same size, so only the layouts
(not the block shapes) can tell a swap, on Explicit and Auto axes.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import f32, ops, pytree_dataclass, typed_shard_map, verify
from shardtypes.checking import kernel_layouts

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
RNG = np.random.default_rng(23)
W = RNG.standard_normal((8, 8)).astype(np.float32)
X = RNG.standard_normal((4, 8)).astype(np.float32)
MODES = [(True, True), (True, False), (False, True), (False, False)]  # (jitted, check_vma)
MODE_IDS = ["jit-vma", "jit-novma", "eager-vma", "eager-novma"]


def square(kind):
    return make_mesh(kind, (2, 2), ("embed", "mlp"))


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-4)


def run(f, mesh, *args, jitted=True, check_vma=True):
    kernel = typed_shard_map(f, check_vma=check_vma)
    return (jax.jit(kernel) if jitted else kernel)(*args)


@pytree_dataclass
class Params:
    w2: f32[b"d_ff/embed d_model/mlp"]


def params(mesh):
    return Params(put(mesh, W, "embed", "mlp"))


# ---------------------------------------------------------------------------------------------
# Layouts through jnp code.


def scaled_local_swapped(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    w: f32[b"d_ff/mlp d_model/embed"] = p.w2 * 2.0  # FSDP and TP swapped after a jnp op
    return w


def scaled_local_right(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    w: f32[b"d_ff/embed d_model/mlp"] = jnp.tanh(p.w2) * 2.0 + 1.0
    return w


def transposed_local(p: Params) -> f32[b"d_model/mlp d_ff/embed"]:
    t: f32[b"d_model/mlp d_ff/embed"] = jnp.transpose(p.w2)
    return t


def transposed_wrong(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    t: f32[b"d_model/embed d_ff/mlp"] = p.w2.T
    return t.T


LOCAL_SWAP = (r"in kernel scaled_local_swapped\(\), the value assigned to w .*: it is laid out P\('embed', 'mlp'\) "
              r"\(p\.w2 \(argument \"p\" of .*, through mul\), but the annotation says P\('mlp', 'embed'\): dim 0 is split "
              r"over 'embed' here but split over 'mlp' in the annotation; .*swapped between dims; all of size 2")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted,check_vma", MODES, ids=MODE_IDS)
def test_an_annotated_local_computed_by_jnp_is_compared_with_its_operand_layout(kind, jitted, check_vma):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=LOCAL_SWAP):
            run(scaled_local_swapped, mesh, params(mesh), jitted=jitted, check_vma=check_vma)
        close(run(scaled_local_right, mesh, params(mesh), jitted=jitted, check_vma=check_vma),
              np.tanh(W) * 2 + 1)
        close(run(transposed_local, mesh, params(mesh), jitted=jitted, check_vma=check_vma), W.T)
        with pytest.raises(TypeCheckError, match=r"value assigned to t .*laid out P\('mlp', 'embed'\) "
                           r"\(p\.w2 \(argument \"p\" of .*, through transpose\), but the annotation says "
                           r"P\('embed', 'mlp'\)"):
            run(transposed_wrong, mesh, params(mesh), jitted=jitted, check_vma=check_vma)


def mixed(p: Params, q: f32[b"d_ff/mlp d_model/embed"]) -> f32[b"d_ff/embed d_model/mlp"]:
    s: f32[b"d_ff/embed d_model/mlp"] = p.w2 + q  # device (e, m) adds block (e, m) to block (m, e)
    return s


@pytest.mark.parametrize("kind", KINDS)
def test_operands_split_over_different_axes_are_refused_where_checked(kind):
    """Each device adds blocks of different parts of the dims (the blocks agree in shape, so
    JAX runs it): the sum is each device's own, not the global sum the annotation claims."""
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=(
                r"in kernel mixed\(\), JAX's 'add' combines dim 0 of an operand laid out P\('embed', 'mlp'\) "
                r"\(p.w2 .*\) with one laid out P\('mlp', 'embed'\) \(argument \"q\" of mixed\(\).*: the dim is split "
                r"over 'embed' in the first but over 'mlp' in the second .*each device combines blocks of different "
                r"parts of the dim; the per-device values then reach the value assigned to s of mixed\(\)")):
            run(mixed, mesh, params(mesh), put(mesh, W, "mlp", "embed"))


def gathers_with_lax(p: Params) -> f32[b"d_ff d_model/mlp"]:
    return jax.lax.all_gather(p.w2, "mlp", axis=0, tiled=True)  # dim 0 is split over 'embed'


def gathers_right_with_lax(p: Params) -> f32[b"d_ff d_model/mlp"]:
    return jax.lax.all_gather(p.w2, "embed", axis=0, tiled=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted,check_vma", MODES, ids=MODE_IDS)
def test_a_raw_lax_gather_over_the_wrong_axis_is_caught(kind, jitted, check_vma):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        # With check_vma on or off alike: the pass says why (JAX's varying check waits for it).
        message = (r"in kernel gathers_with_lax\(\), JAX's 'all_gather' gathers dim 0 over mesh axes \('mlp',\), in that "
                   r"order, but that dim of its operand is laid out P\('embed', 'mlp'\) \(p.w2 \(argument \"p\" of .*\): split "
                   r"over 'embed'; a tiled gather undoes the mesh axes a dim is split over from the last")
        with pytest.raises(TypeCheckError, match=message):
            run(gathers_with_lax, mesh, params(mesh), jitted=jitted, check_vma=check_vma)
        if not check_vma:  # (JAX types the plain gather varying over 'embed')
            close(run(gathers_right_with_lax, mesh, params(mesh), jitted=jitted, check_vma=False), W)


def contracts_mismatched(x: f32[b"b f/embed"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return jax.lax.psum(x @ w, ("embed", "mlp"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_matmul_contracting_blocks_of_different_splits_is_caught(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=r"in kernel contracts_mismatched\(\), JAX's 'dot_general' "
                           r"\(jnp.einsum, @, jnp.dot\) contracts dim 1 of an operand laid out P\(None, 'embed'\) "
                           r"\(argument \"x\" of .* with dim 0 of one laid out P\('mlp', None\) \(argument \"w\" of"):
            run(contracts_mismatched, mesh, put(mesh, X, None, "embed"), put(mesh, W, "mlp"), check_vma=False)


def operand_of_op(p: Params) -> f32[b"d_ff d_model"]:
    return ops.all_gather("d_ff/mlp d_model/embed -> d_ff d_model", p.w2 + 0.0)


@pytest.mark.parametrize("kind", KINDS)
def test_an_op_operand_computed_by_jnp_is_compared_with_the_spec(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=r"in kernel operand_of_op\(\), shardtypes.ops.all_gather\("
                           r"'d_ff/mlp d_model/embed -> d_ff d_model'\): operand: it is laid out "
                           r"P\('embed', 'mlp'\) \(p\.w2 \(argument \"p\" of .*, through add\), but the spec string says"):
            run(operand_of_op, mesh, params(mesh), check_vma=False)


# ---------------------------------------------------------------------------------------------
# Sums still owed, through the user's own code.


def forgets_psum(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return x @ w


def tanh_before_psum(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return jax.lax.psum(jnp.tanh(x @ w), "mlp")


def psum_then_tanh(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    h = jax.lax.psum(x @ w * 0.5, "mlp")
    return jnp.tanh(h)


def adds_bias_to_partial(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"], bias: f32[b"m"]) -> f32[b"b m"]:
    return jax.lax.psum(x @ w + bias, "mlp")


def squares_partial(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    u = x @ w
    return jax.lax.psum(u * u, "mlp")


def exp_in_a_jitted_helper(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return jax.lax.psum(jax.jit(jnp.exp)(x @ w), "mlp")


def partial_through_scan(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    out, _ = jax.lax.scan(lambda c, _: (c * 2.0, None), x @ w, None, length=2)
    return out


def xw_args(mesh):
    return put(mesh, X, None, "mlp"), put(mesh, W, "mlp")


MATMUL = r"made by a dot_general \(jnp.einsum, @, jnp.dot\) contracting dim 1 split over mesh axis 'mlp'"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted,check_vma", MODES, ids=MODE_IDS)
def test_a_partial_sum_of_a_jnp_matmul_is_followed(kind, jitted, check_vma):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        args = xw_args(mesh)
        go = lambda f, *a: run(f, mesh, *(a or args), jitted=jitted, check_vma=check_vma)  # noqa: E731
        close(go(psum_then_tanh), np.tanh(X @ W * 0.5))
        if check_vma:  # JAX's own check (varying over 'mlp') speaks first on a returned partial sum
            with pytest.raises(TypeCheckError, match="forgets_psum"):
                go(forgets_psum)
        else:
            with pytest.raises(TypeCheckError, match=r"in kernel forgets_psum\(\), the return value of "
                               r"forgets_psum\(\).*: it is a partial sum still owing a sum over mesh axis "
                               rf"'mlp' \({MATMUL}"):
                go(forgets_psum)
        with pytest.raises(TypeCheckError, match=rf"in kernel tanh_before_psum\(\), a value that is a partial "
                           rf"sum still owing a sum over mesh axis 'mlp' \({MATMUL}.*\) reaches JAX's 'tanh'"):
            go(tanh_before_psum)
        with pytest.raises(TypeCheckError, match=r"JAX's 'mul' multiplies two partial sums"):
            go(squares_partial)
        with pytest.raises(TypeCheckError, match=r"in kernel exp_in_a_jitted_helper\(\), .*reaches JAX's 'exp'"):
            go(exp_in_a_jitted_helper)
        bias = put(mesh, np.ones(8, np.float32))
        with pytest.raises(TypeCheckError, match=r"JAX's 'add' adds a value that is a partial sum .* and one "
                           r"that owes none and is the same on every device \(argument \"bias\" of .*, through broadcast_in_dim\): after the sum over the mesh the "
                           r"second is counted once per device"):
            go(adds_bias_to_partial, *args, bias)


@pytest.mark.parametrize("kind", KINDS)
def test_a_partial_sum_through_a_loop_stays_owed(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=r"partial_through_scan\(\).*partial sum still owing a sum "
                           r"over mesh axis 'mlp'"):
            run(partial_through_scan, mesh, *xw_args(mesh), check_vma=False)


@pytest.mark.parametrize("kind", KINDS)
def test_the_gradient_of_a_kernel_with_a_paid_sum(kind):
    mesh = square(kind)
    kernel = typed_shard_map(psum_then_tanh)
    with jax.set_mesh(mesh):
        x, w = xw_args(mesh)
        grad = jax.jit(jax.grad(lambda x, w: kernel(x, w).sum(), argnums=1))(x, w)
    expected = X.T @ (1 - np.tanh(X @ W * 0.5) ** 2) * 0.5
    close(grad, expected)


# ---------------------------------------------------------------------------------------------
# Loops, cond, vmap and AD inside a kernel, and partially manual kernels.


def accumulates_in_scan(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    def step(acc, _):
        return acc + x @ w, None  # a partial sum carried: paid after the loop

    acc, _ = jax.lax.scan(step, (x @ w) * 0.0, None, length=3)
    return jax.lax.psum(acc, "mlp")


def tanh_in_scan(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    def step(acc, _):
        return acc + jnp.tanh(x @ w), None

    acc, _ = jax.lax.scan(step, (x @ w) * 0.0, None, length=3)
    return jax.lax.psum(acc, "mlp")


def swapped_after_loop(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    w = jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] * 2.0), (0, p.w2))[1]
    y: f32[b"d_ff/mlp d_model/embed"] = w
    return y


def swapped_after_cond(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    w = jax.lax.cond(jax.lax.axis_index("embed") == 0, lambda v: v * 2.0, lambda v: v + 1.0, p.w2)
    y: f32[b"d_ff/mlp d_model/embed"] = w
    return y


def swapped_after_vmap(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    y: f32[b"d_ff/mlp d_model/embed"] = jax.vmap(lambda row: row * 2.0)(p.w2)
    return y


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted,check_vma", MODES, ids=MODE_IDS)
def test_loops_cond_and_vmap_are_followed(kind, jitted, check_vma):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        go = lambda f, *a: run(f, mesh, *a, jitted=jitted, check_vma=check_vma)  # noqa: E731
        close(go(accumulates_in_scan, *xw_args(mesh)), 3 * X @ W)
        with pytest.raises(TypeCheckError, match=r"in kernel tanh_in_scan\(\), .*reaches JAX's 'tanh'"):
            go(tanh_in_scan, *xw_args(mesh))
        for f in (swapped_after_loop, swapped_after_cond, swapped_after_vmap):
            with pytest.raises(TypeCheckError, match=rf"in kernel {f.__name__}\(\), the value assigned to y "
                               r".*: it is laid out P\('embed', 'mlp'\) .*but the annotation says "
                               r"P\('mlp', 'embed'\)"):
                go(f, params(mesh))


def mlp_block(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return jax.lax.psum(jax.nn.relu(x) @ w, "mlp")


@pytest.mark.parametrize("kind", KINDS)
def test_the_backward_pass_of_a_kernel_raises_nothing(kind):
    """JAX's AD adds cotangents with add_any, transposes broadcasts into sums and pvary into
    psum: the pass follows all of it without a false error, eager and jitted."""
    mesh = square(kind)
    kernel = typed_shard_map(mlp_block)
    loss = lambda x, w: kernel(x, w).sum()  # noqa: E731
    with jax.set_mesh(mesh):
        x, w = xw_args(mesh)
        for grad in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
            gx, gw = grad(x, w)
            close(gw, np.maximum(X, 0).T @ np.ones((4, 8), np.float32))


@typed_shard_map(axis_names={"mlp"})
def partial_manual_tanh(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return jax.lax.psum(jnp.tanh(x @ w), "mlp")


@typed_shard_map(axis_names={"mlp"})
def partial_manual_ok(x: f32[b"b/embed f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b/embed m"]:
    return jnp.tanh(jax.lax.psum(x @ w, "mlp"))


@pytest.mark.parametrize("kind", KINDS)
def test_partially_manual_kernels_follow_the_manual_axes(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        x, w = xw_args(mesh)
        with pytest.raises(TypeCheckError, match=r"in kernel partial_manual_tanh\(\), .*owing a sum over mesh "
                           r"axis 'mlp'.*reaches JAX's 'tanh'"):
            jax.jit(partial_manual_tanh)(x, w)
        close(jax.jit(partial_manual_ok)(put(mesh, X, "embed", "mlp"), w), np.tanh(X @ W))


@pytest.mark.parametrize("shape", [(2, 2), (4, 2), (2, 4)])
def test_partially_manual_kernels_on_auto_axes_run(shape):
    """JAX's inspect_array_sharding misreads shardings inside a partially manual region (the
    wrong axis on 2x2, an AssertionError inside JAX on 4x2): the body's blocks get no
    compile-time check there (a false error before), the global arguments still do."""
    mesh = make_mesh("auto", shape, ("embed", "mlp"))
    with jax.set_mesh(mesh):
        x, w = put(mesh, X, "embed", "mlp"), put(mesh, W, "mlp")
        close(jax.jit(partial_manual_ok)(x, w), np.tanh(X @ W))
        with pytest.raises(TypeCheckError, match=r"argument \"x\".*partial_manual_ok\(\)"):
            jax.jit(partial_manual_ok)(put(mesh, X, "mlp", "embed"), w)  # wrongly laid out input


# ---------------------------------------------------------------------------------------------
# verify, and no state left behind.


def test_verify_reports_a_jnp_swap_and_a_forgotten_reduction_at_64x64():
    report = verify(typed_shard_map(scaled_local_swapped, check_vma=False), {"embed": 64, "mlp": 64})
    (problem,) = report.problems
    assert "value assigned to w" in str(problem) and "through mul" in str(problem)
    assert "swapped between dims; all of size 64" in str(problem)
    report = verify(typed_shard_map(tanh_before_psum, check_vma=False), {"embed": 64, "mlp": 64})
    (problem,) = report.problems
    assert "reaches JAX's 'tanh'" in str(problem) and "contracting dim 1 split over mesh axis 'mlp'" in str(problem)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_pass_leaves_no_table_behind(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError):
            run(tanh_before_psum, mesh, *xw_args(mesh), check_vma=False)
        assert not kernel_layouts.trace_open()
        close(run(psum_then_tanh, mesh, *xw_args(mesh), check_vma=False), np.tanh(X @ W * 0.5))


@pytest.mark.parametrize("kind", KINDS)
def test_without_flow_the_pass_does_not_follow_the_body(kind):
    """kernel_layouts.without_flow (test-facing, for the test below) turns the jaxpr pass off, and
    only inside: the partial sum reaching tanh, which only the pass sees, goes unnoticed there and
    is refused again after."""
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with kernel_layouts.without_flow():
            run(tanh_before_psum, mesh, *xw_args(mesh), jitted=False, check_vma=False)
        with pytest.raises(TypeCheckError, match="reaches JAX's 'tanh'"):
            run(tanh_before_psum, mesh, *xw_args(mesh), jitted=False, check_vma=False)


SEEN: list = []


def counts_its_traces(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    SEEN.append(None)
    return jax.lax.psum(x @ w, "mlp")


@pytest.mark.parametrize("kind", KINDS)
def test_the_body_is_traced_once(kind):
    """The pass reads the jaxpr of the one trace; the shard_map binds it from jit's cache."""
    mesh = square(kind)
    with jax.set_mesh(mesh):
        SEEN.clear()
        jax.jit(typed_shard_map(counts_its_traces)).trace(*xw_args(mesh))
        assert len(SEEN) == 1
        SEEN.clear()
        typed_shard_map(counts_its_traces)(*xw_args(mesh))
        assert len(SEEN) == 1


def compiled(jitted, *args):
    text = jitted.lower(*args).compile().as_text().split("\nFileNames")[0]  # (source locations)
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    return [line for line in text.splitlines() if not line.startswith("HloModule")]


@pytest.mark.parametrize("kind", KINDS)
def test_the_pass_keeps_the_compiled_program(kind):
    """Tracing the body into a jaxpr and evaluating it gives the program tracing it directly
    gives (the pass is trace-time only)."""
    mesh = square(kind)
    with jax.set_mesh(mesh):
        args = xw_args(mesh)
        with_pass = compiled(jax.jit(typed_shard_map(psum_then_tanh)), *args)
        with kernel_layouts.without_flow():
            without = compiled(jax.jit(typed_shard_map(psum_then_tanh)), *args)
    assert with_pass == without
