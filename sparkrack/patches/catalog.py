"""The SM121 (DGX Spark GB10) source patches (STDLIB ONLY: shipped into the serving container).

Every anchor below was taken from the real wheels on PyPI and is exercised by
tests/patches/test_patches.py against them (sglang 0.5.10, 0.5.11, 0.5.12, 0.5.13, 0.5.16;
flashinfer-python 0.6.7.post2, 0.6.8.post1, 0.6.11.post1, 0.6.12; nvidia-cutlass-dsl 4.4.2, 4.5.2).
Version ranges: the lower bound is the oldest release verified; an upper bound is set where the
patched code is gone upstream (the patch then reports NOT-APPLICABLE). A release inside an open
range whose code changed reports DRIFT, never a silent success.
"""

from __future__ import annotations

if __package__:  # imported from the sparkrack package
    from sparkrack.patches.engine import FlagRule, Hunk, Patch, Target
else:  # flat copy in the serving container (/opt/sparkrack), imported as "catalog"
    from engine import FlagRule, Hunk, Patch, Target  # type: ignore[import-not-found,no-redef]

SEED_003 = (
    "src:roce-post (Qwen3.5-397B NVFP4 on 4x Spark: SM121 CUTLASS patch, EP=4 runtime patches)"
)

# Expert parallelism > 1: the EP-correctness patches are inert (and therefore not applied) at EP=1.
EP_GT_1 = FlagRule(
    names=("--ep-size", "--ep", "--expert-parallel-size"), op="gt", value="1", default="1"
)


def _sglang_file(path: str, versions: str) -> tuple[Target, ...]:
    return (Target(path=path, dists=("sglang",), versions=versions),)


_CUTLASS_MMA = "cutlass/cute/nvgpu/tcgen05/mma.py"
_CUTLASS_ARCH = "cutlass/base_dsl/arch.py"
_ARCH_ENUM_121 = "sm_121a = (12, 1"

CUTLASS_DSL_SM121 = Patch(
    id="cutlass-dsl-sm121-admissible-archs",
    description=(
        "CUTLASS DSL: admit sm_120a and sm_121a in tcgen05 BlockScaledMmaOp.admissible_archs "
        "(upstream lists only sm_100a/sm_103a), so the FP4 JIT kernels build on GB10"
    ),
    seed=SEED_003,
    targets=(
        Target(
            path="nvidia_cutlass_dsl/python_packages/" + _CUTLASS_MMA,
            dists=("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl"),
            versions=">=4.4.0",
            requires=(("nvidia_cutlass_dsl/python_packages/" + _CUTLASS_ARCH, _ARCH_ENUM_121),),
        ),
        Target(
            # the copy of CuTe DSL bundled in the flashinfer wheel
            path="flashinfer/data/cutlass/python/CuTeDSL/" + _CUTLASS_MMA,
            dists=("flashinfer-python",),
            versions=">=0.6.7",
            requires=(("flashinfer/data/cutlass/python/CuTeDSL/" + _CUTLASS_ARCH, _ARCH_ENUM_121),),
        ),
    ),
    scope="class BlockScaledMmaOp(",
    hunks=(
        Hunk(
            anchor=(
                "    admissible_archs = [\n        Arch.sm_100a,\n        Arch.sm_103a,\n    ]\n"
            ),
            replacement=(
                "    admissible_archs = [\n"
                "        Arch.sm_100a,\n"
                "        Arch.sm_103a,\n"
                "        # [sparkrack-patch:cutlass-dsl-sm121-admissible-archs] GB10 has the FP4\n"
                "        # block-scaled tensor cores; admit the SM12x arch-specific targets.\n"
                "        Arch.sm_120a,\n"
                "        Arch.sm_121a,\n"
                "    ]\n"
            ),
        ),
    ),
    upstream_fix="Arch.sm_121a",
)

SGLANG_JIT_ARCH = Patch(
    id="sglang-jit-arch-sm120f",
    description=(
        "SGLang JIT kernels: on compute capability 12.1 build for the sm_120f family target "
        "instead of compute_121/sm_121, whose SASS GB10 cannot execute (illegal instruction "
        "during CUDA graph capture with an fp8 KV cache)"
    ),
    seed="src:roce-post (SM121 JIT architecture mismatch in SGLang's kvcache kernel)",
    # 0.5.16 moved the JIT arch selection out of this file (not patched there).
    targets=_sglang_file("sglang/jit_kernel/utils.py", ">=0.5.10,<0.5.16"),
    scope="def _init_jit_cuda_arch_once(",
    hunks=(
        Hunk(
            anchor='    _CUDA_ARCH = ArchInfo(major, minor, "")\n',
            replacement=(
                "    # [sparkrack-patch:sglang-jit-arch-sm120f] GB10 reports (12, 1); compile for the\n"
                "    # sm_120f family (TVM_FFI_CUDA_ARCH_LIST=12.0f, SGL_CUDA_ARCH=1200 = __CUDA_ARCH__).\n"
                '    suffix = ""\n'
                "    if (major, minor) == (12, 1):\n"
                '        major, minor, suffix = 12, 0, "f"\n'
                "    _CUDA_ARCH = ArchInfo(major, minor, suffix)\n"
            ),
        ),
    ),
)

SGLANG_CUTLASS_MOE_FP4_EP = Patch(
    id="sglang-cutlass-moe-fp4-ep",
    description=(
        "cutlass_moe_fp4 under EP: zero-initialise a_map/c_map (slots of experts owned by other "
        "ranks are never written by prepare_moe_input) and drop the routing weight where "
        "topk_ids < 0"
    ),
    seed=SEED_003,
    # sglang 0.5.16 removed cutlass_moe_fp4 (NVFP4 MoE goes through FlashInfer there).
    targets=_sglang_file("sglang/srt/layers/moe/cutlass_moe.py", ">=0.5.10,<0.5.16"),
    scope="def cutlass_moe_fp4(",
    flags=(EP_GT_1,),
    hunks=(
        Hunk(
            anchor=(
                "    device = a.device\n"
                "    a_map = torch.empty((topk_ids.numel()), dtype=torch.int32, device=device)\n"
                "    c_map = torch.empty((topk_ids.numel()), dtype=torch.int32, device=device)\n"
            ),
            replacement=(
                "    device = a.device\n"
                "    # [sparkrack-patch:sglang-cutlass-moe-fp4-ep] with EP, experts of other ranks\n"
                "    # arrive as topk_ids == -1: they must carry no weight, and the gather maps must\n"
                "    # not keep uninitialised row indices for their slots.\n"
                "    topk_weights = topk_weights.masked_fill(topk_ids < 0, 0)\n"
                "    a_map = torch.zeros((topk_ids.numel()), dtype=torch.int32, device=device)\n"
                "    c_map = torch.zeros((topk_ids.numel()), dtype=torch.int32, device=device)\n"
            ),
        ),
    ),
)

_MODELOPT_FALLBACK = (
    "        else:\n"
    "            w13_input_scale = layer.w13_input_scale.max(dim=-1).values.to(torch.float32)\n"
    "            w2_input_scale = layer.w2_input_scale\n"
)

SGLANG_MODELOPT_EP_INPUT_SCALE = Patch(
    id="sglang-modelopt-ep-input-scale",
    description=(
        "ModelOpt NVFP4 MoE under EP: the fallback branch of process_weights_after_loading keeps "
        "input scales for all experts while weight_scale_2 holds only this rank's experts; "
        "slice the input scales to the rank's experts"
    ),
    seed=SEED_003,
    targets=_sglang_file("sglang/srt/layers/quantization/modelopt_quant.py", ">=0.5.10"),
    flags=(EP_GT_1,),
    hunks=(
        Hunk(
            anchor=_MODELOPT_FALLBACK,
            replacement=_MODELOPT_FALLBACK
            + (
                "            # [sparkrack-patch:sglang-modelopt-ep-input-scale] keep this EP rank's\n"
                "            # experts only, as weight_scale_2 does (no-op when already local-sized).\n"
                "            if (\n"
                "                layer.moe_ep_size > 1\n"
                "                and w13_input_scale.shape[0] == layer.num_experts\n"
                "                and layer.num_experts != layer.num_local_experts\n"
                "            ):\n"
                "                _ep_first = layer.moe_ep_rank * layer.num_local_experts\n"
                "                _ep_last = _ep_first + layer.num_local_experts\n"
                "                w13_input_scale = w13_input_scale[_ep_first:_ep_last]\n"
                "                w2_input_scale = w2_input_scale[_ep_first:_ep_last]\n"
            ),
        ),
    ),
)

SGLANG_MOE_WNA16_QZEROS_EP = Patch(
    id="sglang-moe-wna16-qzeros-ep",
    description=(
        "moe_wna16 weight loader under EP: write qzeros of a global expert id into its local "
        "slot (skip experts of other ranks) and slice by the MoE-TP rank, not the global TP rank"
    ),
    seed=SEED_003,
    targets=_sglang_file("sglang/srt/layers/quantization/moe_wna16.py", ">=0.5.10"),
    flags=(EP_GT_1,),
    # sglang 0.5.23 (inspected, not in the test set) loads qzeros per local expert id this way.
    upstream_fix="_local_expert_ids(layer, expert_id)",
    hunks=(
        Hunk(
            anchor=(
                '            if "w13_qzeros" in weight_name:\n'
                "                tensor = loaded_weight.view(\n"
                "                    layer.moe_tp_size, -1, loaded_weight.size(1)\n"
                "                )[tp_rank]\n"
                '                if shard_id == "w1":\n'
                "                    param.data[expert_id, : shard_size // 2] = tensor\n"
                "                else:\n"
                "                    param.data[expert_id, shard_size // 2 :] = tensor\n"
            ),
            replacement=(
                '            if "w13_qzeros" in weight_name:\n'
                "                # [sparkrack-patch:sglang-moe-wna16-qzeros-ep] global expert id -> local\n"
                "                # slot (other ranks' experts are skipped); slice by the MoE-TP rank.\n"
                "                local_id = layer._map_global_expert_id_to_local_expert_id(expert_id)\n"
                "                if local_id < 0:\n"
                "                    return\n"
                "                tensor = loaded_weight.view(\n"
                "                    layer.moe_tp_size, -1, loaded_weight.size(1)\n"
                "                )[layer.moe_tp_rank]\n"
                '                if shard_id == "w1":\n'
                "                    param.data[local_id, : shard_size // 2] = tensor\n"
                "                else:\n"
                "                    param.data[local_id, shard_size // 2 :] = tensor\n"
            ),
        ),
        Hunk(
            anchor=(
                '            elif "w2_qzeros" in weight_name:\n'
                "                param.data[expert_id] = loaded_weight.view(\n"
                "                    loaded_weight.size(0), layer.moe_tp_size, -1\n"
                "                )[:, tp_rank]\n"
            ),
            replacement=(
                '            elif "w2_qzeros" in weight_name:\n'
                "                # [sparkrack-patch:sglang-moe-wna16-qzeros-ep] same remapping for w2.\n"
                "                local_id = layer._map_global_expert_id_to_local_expert_id(expert_id)\n"
                "                if local_id < 0:\n"
                "                    return\n"
                "                param.data[local_id] = loaded_weight.view(\n"
                "                    loaded_weight.size(0), layer.moe_tp_size, -1\n"
                "                )[:, layer.moe_tp_rank]\n"
            ),
        ),
    ),
)

PATCHES: tuple[Patch, ...] = (
    CUTLASS_DSL_SM121,
    SGLANG_JIT_ARCH,
    SGLANG_CUTLASS_MOE_FP4_EP,
    SGLANG_MODELOPT_EP_INPUT_SCALE,
    SGLANG_MOE_WNA16_QZEROS_EP,
)
