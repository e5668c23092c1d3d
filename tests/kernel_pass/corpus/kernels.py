"""The corpus: the shard_map kernels that JAX's own tests and tutorial check, written anew.

Sources (JAX jax-v0.11.0): ``tests/shard_map_test.py`` (the named tests of ``ShardMapTest`` and
``SdyIntegrationTest``, and the function specs of ``ShardMapSystematicTest`` over its meshes) and
``docs/notebooks/shard_map.md`` (the tutorial). Each entry computes what its source computes:
the same mesh, specs, ``check_vma``, ``axis_names`` and body, on small deterministic inputs. The
code is this corpus' own. Where the source closes over a value of its caller, the entry closes
over a constant; where it wraps the kernel (``jax.grad``, ``jax.vmap``, ``jax.jvp``,
``jax.remat``), so does ``outer``. Tests about what is not a shard_map kernel over arrays are
listed in ``NOT_INCLUDED`` with the reason.

The registry: ``ENTRIES`` (every entry, in the order of the sources) and ``NOT_INCLUDED``. The
entries live in one module per source, imported here in order: ``from_shard_map_test`` and
``from_shard_map_test_manual`` (``ShardMapTest``), ``from_systematic``
(``ShardMapSystematicTest``), ``from_tutorial`` (``shard_map.md``); ``corpus_kit`` holds ``add``
and the helpers they are written with.
"""

from __future__ import annotations

import from_shard_map_test  # noqa: F401  (each source module adds its entries when imported)
import from_shard_map_test_manual  # noqa: F401
import from_systematic  # noqa: F401
import from_tutorial  # noqa: F401
from corpus_kit import ENTRIES, MD, T
from harness import Entry

__all__ = ["ENTRIES", "NOT_INCLUDED", "Entry"]


NOT_INCLUDED: dict[str, str] = {
    **{T + t: "unreduced/reduced specs (P(unreduced=...), to='reduced'): not expressible in shardtypes annotations"
       for t in ("test_matmul_unreduced", "test_matmul_full_unreduced_out", "test_matmul_unreduced_error",
                 "test_shmap_bwd_rep_to_unreduced_check_vma_true", "test_shmap_unreduced_fsdp_custom_vjp_bwd",
                 "test_shmap_unreduced_fsdp_grad", "test_unreduced_psum_fwd_preduced_bwd",
                 "test_preduced_fwd_unreduced_psum_bwd", "test_all_gather_reduced_fwd_unreduced_psum_scatter_bwd",
                 "test_unreduced_psum_scatter_fwd_all_gather_reduced_bwd", "test_sin_unreduced_error",
                 "test_shmap_auto_unreduced_error", "test_eager_reduced_out", "test_eager_reduced_in",
                 "test_eager_unreduced_out", "test_eager_unreduced_in", "test_pcast_to_unreduced",
                 "test_reduced_vary_automatically_inserted", "test_reduced_vary_automatically_inserted_psum",
                 "test_astype_reduced_fwd_unreduced_bwd_shmap", "test_transpose_unreduced_shmap",
                 "test_one_input_sharded_another_reduced_shmap", "test_reduced_pcast_fwd_unreduced_bwd",
                 "test_one_input_sharded_another_reduced_shmap_no_psum", "test_psum_reduced_input",
                 "test_replicated_unreduced_bitcast_check_vma_false", "test_unreduced_replicated_bitcast",
                 "test_sharded_unreduced_roundtrip_check_vma_false", "test_zero_unreduced",
                 "test_unreduced_bwd_manual_reshard_op_shardy", "test_mul_shmap_unreduced",
                 "test_residual_reduced_preserved_via_nospec", "test_reshape_reduced_fwd_unreduced_bwd",
                 "test_check_vma_false_reduced_fwd_no_psum_on_bwd", "test_check_vma_false_unreduced_fwd_psum_on_bwd")},
    **{T + t: "GPU only (psend/precv, pbroadcast has no CPU lowering)"
       for t in ("test_psend_precv_basic_two_gpus", "test_psend_precv_basic_with_no_deadlock_cycle",
                 "test_psend_precv_basic_with_deadlock_cycle", "test_psend_precv_basic_with_dangling_recv",
                 "test_psend_precv_basic_with_non_matching_source_target_pairs",
                 "test_psend_precv_basic_with_duplicate_source_target_pairs", "test_psend_precv_reverse_two_gpus",
                 "test_pbroadcast_partial_replicated", "test_pbroadcast_fully_replicated")},
    **{T + t: "debugging prints / printing values"
       for t in ("test_eager_repr", "test_debug_print_jit", "test_debug_print_jit_partial_auto",
                 "test_debug_print_eager", "test_partial_auto_debug_print", "test_print_inside_shard_map")},
    **{T + t: "internals (jaxpr shape, DCE, residuals, custom primitives, tracing caches, HLO text)"
       for t in ("test_remat_transform", "test_check_rep_false_doesnt_hit_rep_rules",
                 "test_different_devices_shmap_abstract_mesh_cache_hit", "test_rewrite_process_call",
                 "test_rewrite_post_process_call", "test_transpose_float0", "test_pcast_axis_name_is_not_set",
                 "test_post_process_partial_eval_with_scalar_res", "test_pvary_no_op_one_sized_mesh_axis",
                 "test_mat_invarying", "test_mutable_array_arg_basic", "test_mutable_array_internal_basic",
                 "test_eager_shmap_new_ref", "test_full_like_pvary_existing")},
    **{T + t: "errors about shard_map's own calling convention that annotations cannot express (spec trees "
              "that do not match the arguments, *args, empty or abstract meshes without a NamedSharding, "
              "no mesh)"
       for t in ("test_tree_prefix_error", "test_error_for_variable_num_args", "test_varargs_error",
                 "test_shmap_abstract_mesh_errors", "test_no_mesh_context_error", "test_shmap_empty_mesh_error",
                 "test_close_over_explicit_sharded_input_error")},
    **{T + t: "jax.smap (another API; not a shard_map with specs)"
       for t in ("test_smap", "test_smap_explicit", "test_smap_replicated", "test_smap_replicated_sharded",
                 "test_smap_auto_error", "test_smap_auto_explicit", "test_smap_auto_explicit_nest",
                 "test_smap_auto_explicit_nest_inner_none", "test_smap_auto_explicit_nest_mesh_call_time",
                 "test_smap_nested_psum", "test_no_auto_pcast_config")},
    T + "test_partial_auto_of_pjit_different_mesh": "skipped by JAX under Shardy (the default)",
    T + "test_vmap_explicit_mesh_axis_error (second half)": "jax.vmap refuses spmd_axis_name with Explicit-sharded "
        "arguments before it calls the kernel (the first half is included)",
    T + "test_rep_none_canonicalization": "skipped by JAX under Shardy (complex values)",
    T + "test_remove_one_sized_mesh_axis_from_vma": "needs the jax_remove_size_one_mesh_axis_from_type flag",
    T + "test_all_reduce_rgv3_multiple_meshes": "two meshes in one program, TPU-only lowering option",
    "shard_map_test.py::CustomPartitionerTest": "custom partitioning",
    "shard_map_test.py::SmapSystematicTest": "jax.smap",
    "shard_map_test.py::ShardMapSystematicTest::test_grads_closure/test_vmap_closure":
        "closures over the caller's traced values (their function specs are covered by the other draws)",
    MD + "pcast example (out_specs=None)": "returns nothing",
    MD + "loss_tp": "a jit-level loss around gemm_tp, which is included",
}
