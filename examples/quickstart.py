"""shardtypes in two minutes: checked functions on an 8-device simulated CPU mesh.

    python examples/quickstart.py           # Explicit mesh axes (jax.make_mesh's default)
    python examples/quickstart.py --auto    # Auto mesh axes

Each annotation below says an array's dtype, its dims and which mesh axis each dim is sharded
over. Calls are checked against all three; the last section makes a deliberate mistake.
"""

import argparse

import jax

jax.config.update("jax_num_cpu_devices", 8)  # before anything touches the devices

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from shardtypes import TypeCheckError, config, dims, f32, typechecked  # noqa: E402


@typechecked
def rms_norm(x: f32[jax.Array, b"batch/d embed"], scale: f32[jax.Array, b"embed"]) -> f32[jax.Array, b"batch/d embed"]:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


@typechecked
def mlp(
    x: f32[jax.Array, b"batch/d embed"], w_up: f32[jax.Array, b"embed hidden/t"]
) -> f32[jax.Array, b"batch/d hidden/t"]:
    h: f32[jax.Array, b"batch/d hidden/t"] = jax.nn.gelu(x @ w_up)  # annotated locals are checked too
    return h


@typechecked
def block(
    x: f32[jax.Array, b"batch/d embed"], scale: f32[jax.Array, b"embed"], w_up: f32[jax.Array, b"embed hidden/t"]
):
    # Nested checked calls share one table: 'embed' means one size across this call tree.
    return mlp(rms_norm(x, scale), w_up)


@typechecked
def local_sum(x: f32[jax.Array, b"batch/d hidden/t"]) -> f32[jax.Array, b"batch/d hidden/t"]:
    # Inside shard_map x is a local shard of 2x8, but the annotation speaks in global sizes:
    # shardtypes multiplies each dim by the sizes of the manual axes it is sharded over.
    assert dict(dims()) == {"batch": 8, "hidden": 16}
    return x + jax.lax.psum(x, "t")


def spec_of(x: jax.Array) -> P:
    sharding = x.sharding
    return sharding.spec if isinstance(sharding, NamedSharding) else P()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--auto", action="store_true", help="use Auto mesh axes")
    args = parser.parse_args()
    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    print(f"mesh: {dict(mesh.shape)} with {kind.name} axes on {len(jax.devices())} CPU devices\n")

    def put(a, *spec):
        return jax.device_put(a, NamedSharding(mesh, P(*spec)))

    key = jax.random.key(0)
    x = put(jax.random.normal(key, (8, 4)), "d")  # batch=8 over d, embed=4
    scale = put(jnp.ones((4,)))
    w_up = put(jax.random.normal(key, (4, 16)), None, "t")  # hidden=16 over t

    with jax.set_mesh(mesh):
        out = block(x, scale, w_up)
        print(f"eager  block -> {out.shape} {spec_of(out)}")
        out = jax.jit(block)(x, scale, w_up)
        print(f"jitted block -> {out.shape} {spec_of(out)}")
        kernel = jax.shard_map(local_sum, in_specs=P("d", "t"), out_specs=P("d", "t"))
        out = jax.jit(kernel)(out)
        print(f"shard_map    -> {out.shape} {spec_of(out)}")

        if not config.checks:  # SHARDTYPES_DISABLE=1: the same program, unchecked
            print("\nChecks are off (SHARDTYPES_DISABLE=1), so the deliberate mistakes are left out")
            return

        print("\nA deliberate mistake: x laid out over 't' instead of 'd'")
        wrong = put(jax.random.normal(key, (8, 4)), "t")
        try:
            block(wrong, scale, w_up)
        except TypeCheckError as e:
            print(f"  TypeCheckError: {e}")

        print("\nAnother: a weight whose 'embed' is 6 where x said 4")
        try:
            block(x, scale, put(jnp.ones((6, 16)), None, "t"))
        except TypeCheckError as e:
            print(f"  TypeCheckError: {e}")


if __name__ == "__main__":
    main()
