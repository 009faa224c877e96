"""The SM121 patch engine against the REAL files of the REAL wheels from PyPI.

Pinned wheels (downloaded once into .cache/wheels by tests/patch_fixtures.py):
- sglang 0.5.10, 0.5.11, 0.5.12, 0.5.13: the releases the seed images carry (0.5.13 stands in for
  the seed's 0.5.13-dev build); 0.5.16: first release where two patched spots are gone upstream.
- flashinfer-python 0.6.7.post2 / 0.6.8.post1 / 0.6.11.post1 / 0.6.12: the pins of those sglang
  releases (each bundles a CuTe DSL copy).
- nvidia-cutlass-dsl-libs-base 4.4.2 / 4.5.2: the CuTe DSL pinned by sglang 0.5.11 / 0.5.13.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkrack.patches import PATCH_IDS, PATCHES
from sparkrack.patches.catalog import (
    CUTLASS_DSL_SM121,
    SGLANG_CUTLASS_MOE_FP4_EP,
    SGLANG_JIT_ARCH,
    SGLANG_MODELOPT_EP_INPUT_SCALE,
    SGLANG_MOE_WNA16_QZEROS_EP,
)
from sparkrack.patches.engine import (
    ALREADY,
    APPLIED,
    DRIFT,
    NOT_APPLICABLE,
    WOULD_APPLY,
    Patch,
    expand_roots,
    run_patch,
    validate_catalog,
    version_in,
    version_key,
)

pytest_plugins = ("patch_fixtures",)
SitePackages = Callable[..., Path]  # the site_packages fixture (tests/patch_fixtures.py)

SGLANG_SEED_VERSIONS = ("0.5.10", "0.5.11", "0.5.12", "0.5.13")
SGLANG_BEYOND = "0.5.16"
FLASHINFER_VERSIONS = ("0.6.7.post2", "0.6.8.post1", "0.6.11.post1", "0.6.12")
CUTLASS_DSL_VERSIONS = ("4.4.2", "4.5.2")

EP4 = ["--model-path", "m", "--tp-size", "4", "--ep-size", "4"]
SGLANG_PATCHES = (
    SGLANG_JIT_ARCH,
    SGLANG_CUTLASS_MOE_FP4_EP,
    SGLANG_MODELOPT_EP_INPUT_SCALE,
    SGLANG_MOE_WNA16_QZEROS_EP,
)

pytestmark = pytest.mark.tools  # real engine wheels
CUTLASS_ARCH_REL = "cutlass/base_dsl/arch.py"


@dataclass(frozen=True)
class Copy:
    """One real wheel holding one target file of a patch."""

    patch: Patch
    dist: str
    version: str
    target: str
    extra: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[str, ...]:
        return (self.target, *self.extra)

    def __str__(self) -> str:
        return f"{self.patch.id}@{self.dist}-{self.version}"


def _cutlass_copies() -> list[Copy]:
    lib, fi = (t.path for t in CUTLASS_DSL_SM121.targets)
    lib_arch = lib.replace("cutlass/cute/nvgpu/tcgen05/mma.py", CUTLASS_ARCH_REL)
    fi_arch = fi.replace("cutlass/cute/nvgpu/tcgen05/mma.py", CUTLASS_ARCH_REL)
    copies = [
        Copy(CUTLASS_DSL_SM121, "nvidia-cutlass-dsl-libs-base", v, lib, (lib_arch,))
        for v in CUTLASS_DSL_VERSIONS
    ]
    copies += [
        Copy(CUTLASS_DSL_SM121, "flashinfer-python", v, fi, (fi_arch,)) for v in FLASHINFER_VERSIONS
    ]
    return copies


COPIES: list[Copy] = _cutlass_copies() + [
    Copy(p, "sglang", v, p.targets[0].path) for p in SGLANG_PATCHES for v in SGLANG_SEED_VERSIONS
]


def _build(site_packages: SitePackages, copy: Copy) -> Path:
    return site_packages((copy.dist, copy.version, copy.members))


def _run(patch: Patch, site: Path, argv: list[str] | None = None, arch: str = "X", write=True):
    return run_patch(
        patch,
        [site],
        model_arch=arch,
        server_argv=EP4 if argv is None else argv,
        write=write,
    )


def _only(report: Any, target: str) -> Any:
    [outcome] = [o for o in report.outcomes if o.target == target]
    return outcome


def _snapshot(site: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()
    }


# ---------------------------------------------------------------------------------------------
# Semantic checks: what each patch must have changed in the real file.


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"function {name} not found")


def _archs_of(tree: ast.Module) -> dict[str, list[str]]:
    """class name -> admissible_archs given as a list literal of Arch.<name>."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and any(
                        isinstance(t, ast.Name) and t.id == "admissible_archs" for t in stmt.targets
                    )
                    and isinstance(stmt.value, ast.List)
                ):
                    out[node.name] = [
                        e.attr if isinstance(e, ast.Attribute) else ast.literal_eval(e)
                        for e in stmt.value.elts
                    ]
    return out


def check_cutlass(before: str, after: str) -> None:
    old, new = _archs_of(ast.parse(before)), _archs_of(ast.parse(after))
    assert old["BlockScaledMmaOp"] == ["sm_100a", "sm_103a"]
    assert new["BlockScaledMmaOp"] == ["sm_100a", "sm_103a", "sm_120a", "sm_121a"]
    # every other op keeps its list
    assert {k: v for k, v in new.items() if k != "BlockScaledMmaOp"} == {
        k: v for k, v in old.items() if k != "BlockScaledMmaOp"
    }


def _jit_arch(source: str, capability: tuple[int, int]) -> tuple[str, str]:
    """Run the file's ArchInfo + _init_jit_cuda_arch_once on a GPU reporting ``capability``."""
    tree = ast.parse(source)
    wanted = [
        n
        for n in tree.body
        if (isinstance(n, ast.ClassDef) and n.name == "ArchInfo")
        or (isinstance(n, ast.FunctionDef) and n.name == "_init_jit_cuda_arch_once")
    ]
    assert len(wanted) == 2
    for node in wanted:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []  # cache_once: irrelevant for a single call
    module = ast.Module(body=wanted, type_ignores=[])
    fake_cuda = SimpleNamespace(
        current_device=lambda: 0, get_device_capability=lambda d: capability
    )
    namespace: dict[str, Any] = {
        "dataclass": dataclasses.dataclass,
        "torch": SimpleNamespace(cuda=fake_cuda),
        "logger": logging.getLogger("jit-test"),
        "__name__": "jit_under_test",
    }
    sys.modules["jit_under_test"] = SimpleNamespace(**namespace)  # type: ignore[assignment]
    try:
        exec(compile(module, "utils.py", "exec"), namespace)
        namespace["_init_jit_cuda_arch_once"]()
    finally:
        del sys.modules["jit_under_test"]
    arch = namespace["_CUDA_ARCH"]
    return arch.target_name, arch.jit_flag


def check_jit(before: str, after: str) -> None:
    # the bug, in the pristine file: GB10 gets compute_121 / sm_121
    assert _jit_arch(before, (12, 1)) == ("12.1", "-DSGL_CUDA_ARCH=1210")
    # patched: the sm_120f family, and the injected arch macro matches __CUDA_ARCH__ of sm_120f
    assert _jit_arch(after, (12, 1)) == ("12.0f", "-DSGL_CUDA_ARCH=1200")
    # every other GPU is untouched
    for cap in ((10, 0), (12, 0), (9, 0)):
        assert _jit_arch(after, cap) == _jit_arch(before, cap)


def _calls(node: ast.AST, attr: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
    ]


def _assigned(fn: ast.FunctionDef, name: str) -> list[ast.Assign]:
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
    ]


def check_cutlass_moe(before: str, after: str) -> None:
    old_fn = _function(ast.parse(before), "cutlass_moe_fp4")
    fn = _function(ast.parse(after), "cutlass_moe_fp4")
    for name in ("a_map", "c_map"):
        [old] = _assigned(old_fn, name)
        [new] = _assigned(fn, name)
        assert isinstance(old.value, ast.Call) and ast.unparse(old.value.func) == "torch.empty"
        assert isinstance(new.value, ast.Call) and ast.unparse(new.value.func) == "torch.zeros"
    [mask] = [a for a in _assigned(fn, "topk_weights") if _calls(a, "masked_fill")]
    assert ast.unparse(mask.value) == "topk_weights.masked_fill(topk_ids < 0, 0)"
    # the mask runs before the routing maps are built and before the weights are applied
    [prepare] = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "prepare_moe_input"
    ]
    assert mask.lineno < prepare.lineno
    asserts = {id(n) for a in ast.walk(fn) if isinstance(a, ast.Assert) for n in ast.walk(a)}
    reads = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.Name)
        and n.id == "topk_weights"
        and isinstance(n.ctx, ast.Load)
        and id(n) not in asserts  # the shape assertion reads no values
    ]
    assert min(reads) == mask.lineno and max(reads) > mask.lineno, "weights read before the mask"
    # the FP8 path in the same file keeps torch.empty (out of the patch scope)
    fp8_old = _function(ast.parse(before), "cutlass_fused_experts_fp8")
    fp8_new = _function(ast.parse(after), "cutlass_fused_experts_fp8")
    assert ast.dump(fp8_old) == ast.dump(fp8_new)


def check_modelopt(before: str, after: str) -> None:
    tree = ast.parse(after)
    guards = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.If)
        and "moe_ep_size > 1" in ast.unparse(n.test)
        and "num_local_experts" in ast.unparse(n.test)
    ]
    assert len(guards) == 1
    body = ast.unparse(ast.Module(body=guards[0].body, type_ignores=[]))
    assert "w13_input_scale = w13_input_scale[_ep_first:_ep_last]" in body
    assert "w2_input_scale = w2_input_scale[_ep_first:_ep_last]" in body
    assert "_ep_first = layer.moe_ep_rank * layer.num_local_experts" in body
    # it sits right after the fallback assignments it corrects, in the same branch
    parent_bodies = [
        n.orelse for n in ast.walk(tree) if isinstance(n, ast.If) and guards[0] in n.orelse
    ]
    assert len(parent_bodies) == 1
    texts = [ast.unparse(s) for s in parent_bodies[0]]
    assert texts.index("w2_input_scale = layer.w2_input_scale") + 1 == texts.index(
        ast.unparse(guards[0])
    )
    # nothing else in the file changed
    assert len(after.splitlines()) - len(before.splitlines()) == len(
        SGLANG_MODELOPT_EP_INPUT_SCALE.hunks[0].replacement.splitlines()
    ) - len(SGLANG_MODELOPT_EP_INPUT_SCALE.hunks[0].anchor.splitlines())


def check_wna16(before: str, after: str) -> None:
    def qzero_branches(source: str) -> list[str]:
        fn = _function(ast.parse(source), "moe_wna16_weight_loader")
        return [
            ast.unparse(ast.Module(body=n.body, type_ignores=[]))
            for n in ast.walk(fn)
            if isinstance(n, ast.If)
            and ast.unparse(n.test) in ("'w13_qzeros' in weight_name", "'w2_qzeros' in weight_name")
        ]

    old, new = qzero_branches(before), qzero_branches(after)
    assert len(old) == len(new) == 2
    assert all("param.data[expert_id" in b and "moe_tp_rank" not in b for b in old)
    for branch in new:
        assert "local_id = layer._map_global_expert_id_to_local_expert_id(expert_id)" in branch
        assert "if local_id < 0:\n    return" in branch
        assert "param.data[expert_id" not in branch
        assert "param.data[local_id" in branch
        assert "layer.moe_tp_rank]" in branch


SEMANTIC = {
    CUTLASS_DSL_SM121.id: check_cutlass,
    SGLANG_JIT_ARCH.id: check_jit,
    SGLANG_CUTLASS_MOE_FP4_EP.id: check_cutlass_moe,
    SGLANG_MODELOPT_EP_INPUT_SCALE.id: check_modelopt,
    SGLANG_MOE_WNA16_QZEROS_EP.id: check_wna16,
}


# ---------------------------------------------------------------------------------------------
# Per patch × per real wheel


def test_catalog_is_sound() -> None:
    assert validate_catalog(PATCHES) == []
    assert tuple(p.id for p in PATCHES) == PATCH_IDS
    assert set(SEMANTIC) == set(PATCH_IDS), "every patch has a semantic check"


@pytest.mark.parametrize("copy", COPIES, ids=str)
def test_apply_then_again_is_noop(site_packages: SitePackages, copy: Copy) -> None:
    site = _build(site_packages, copy)
    path = site / copy.target
    pristine = path.read_bytes()

    checked = _only(_run(copy.patch, site, write=False), copy.target)
    assert checked.status == WOULD_APPLY, checked
    assert path.read_bytes() == pristine, "check mode wrote"

    first = _only(_run(copy.patch, site), copy.target)
    assert first.status == APPLIED, first
    assert copy.version in first.detail
    patched = path.read_bytes()
    assert patched != pristine
    compile(patched, str(path), "exec")  # the result compiles
    assert copy.patch.marker in patched.decode()
    SEMANTIC[copy.patch.id](pristine.decode(), patched.decode())
    assert path.with_name(path.name + ".orig").read_bytes() == pristine
    assert not list(path.parent.glob("*.sparkrack-tmp")), "temporary file left behind"

    second = _only(_run(copy.patch, site), copy.target)
    assert second.status == ALREADY, second
    assert path.read_bytes() == patched, "second run changed the file"
    assert path.with_name(path.name + ".orig").read_bytes() == pristine


def _alter_anchor(text: str, patch: Patch) -> str:
    """Simulate an upstream edit: a trailing comment on the first line of the first anchor."""
    anchor = patch.hunks[0].anchor
    first, rest = anchor.split("\n", 1)
    assert text.count(anchor) >= 1
    return text.replace(anchor, f"{first}  # changed upstream\n{rest}")


@pytest.mark.parametrize("copy", COPIES, ids=str)
def test_altered_anchor_is_drift_and_untouched(site_packages: SitePackages, copy: Copy) -> None:
    site = _build(site_packages, copy)
    path = site / copy.target
    path.write_text(_alter_anchor(path.read_text(), copy.patch))
    before = _snapshot(site)
    outcome = _only(_run(copy.patch, site), copy.target)
    assert outcome.status == DRIFT
    assert "anchor of hunk 1 not found" in outcome.detail
    assert _snapshot(site) == before, "a DRIFT run must not write anything"


def test_ambiguous_anchor_is_drift(site_packages: SitePackages) -> None:
    copy = Copy(SGLANG_JIT_ARCH, "sglang", "0.5.12", SGLANG_JIT_ARCH.targets[0].path)
    site = _build(site_packages, copy)
    path = site / copy.target
    anchor = SGLANG_JIT_ARCH.hunks[0].anchor
    path.write_text(path.read_text().replace(anchor, anchor + anchor))
    before = _snapshot(site)
    outcome = _only(_run(SGLANG_JIT_ARCH, site), copy.target)
    assert outcome.status == DRIFT and "matches 2 times" in outcome.detail
    assert _snapshot(site) == before


def test_result_that_does_not_compile_is_drift_and_restored(site_packages: SitePackages) -> None:
    copy = Copy(
        SGLANG_MODELOPT_EP_INPUT_SCALE,
        "sglang",
        "0.5.13",
        SGLANG_MODELOPT_EP_INPUT_SCALE.targets[0].path,
    )
    site = _build(site_packages, copy)
    hunk = SGLANG_MODELOPT_EP_INPUT_SCALE.hunks[0]
    broken = dataclasses.replace(
        SGLANG_MODELOPT_EP_INPUT_SCALE,
        hunks=(dataclasses.replace(hunk, replacement=hunk.replacement + "            if (\n"),),
    )
    before = _snapshot(site)
    outcome = _only(_run(broken, site), copy.target)
    assert outcome.status == DRIFT and "does not compile" in outcome.detail
    assert _snapshot(site) == before, "file, backup and temp files must be as before"


def test_hand_edited_patched_text_is_drift(site_packages: SitePackages) -> None:
    copy = Copy(
        SGLANG_CUTLASS_MOE_FP4_EP, "sglang", "0.5.11", SGLANG_CUTLASS_MOE_FP4_EP.targets[0].path
    )
    site = _build(site_packages, copy)
    assert _only(_run(SGLANG_CUTLASS_MOE_FP4_EP, site), copy.target).status == APPLIED
    path = site / copy.target
    path.write_text(
        path.read_text().replace("masked_fill(topk_ids < 0, 0)", "masked_fill(topk_ids < -1, 0)")
    )
    outcome = _only(_run(SGLANG_CUTLASS_MOE_FP4_EP, site), copy.target)
    assert outcome.status == DRIFT and "not intact" in outcome.detail


# ---------------------------------------------------------------------------------------------
# Applicability


def test_sglang_0_5_16_gone_upstream_is_not_applicable(site_packages: SitePackages) -> None:
    """0.5.16 removed cutlass_moe_fp4 and moved the JIT arch code: NOT-APPLICABLE by version."""
    site = site_packages(("sglang", SGLANG_BEYOND, [p.targets[0].path for p in SGLANG_PATCHES]))
    before = _snapshot(site)
    for patch in (SGLANG_JIT_ARCH, SGLANG_CUTLASS_MOE_FP4_EP):
        outcome = _only(_run(patch, site), patch.targets[0].path)
        assert outcome.status == NOT_APPLICABLE
        assert f"sglang {SGLANG_BEYOND} outside" in outcome.detail
    assert _snapshot(site) == before
    # the range is right: the spots really are gone in that release
    assert not (site / SGLANG_JIT_ARCH.targets[0].path).exists()
    moe = (site / SGLANG_CUTLASS_MOE_FP4_EP.targets[0].path).read_text()
    assert "def cutlass_moe_fp4(" not in moe
    unbounded = dataclasses.replace(
        SGLANG_CUTLASS_MOE_FP4_EP,
        targets=(dataclasses.replace(SGLANG_CUTLASS_MOE_FP4_EP.targets[0], versions=""),),
    )
    assert _only(_run(unbounded, site), unbounded.targets[0].path).status == DRIFT
    # the two patches whose code is still there apply on 0.5.16 too
    for patch in (SGLANG_MODELOPT_EP_INPUT_SCALE, SGLANG_MOE_WNA16_QZEROS_EP):
        path = site / patch.targets[0].path
        pristine = path.read_text()
        assert _only(_run(patch, site), patch.targets[0].path).status == APPLIED
        SEMANTIC[patch.id](pristine, path.read_text())


@pytest.mark.parametrize("argv", [[], ["--ep-size", "1"], ["--ep=1"], ["--tp-size", "4"]])
def test_ep_patches_not_applicable_without_expert_parallelism(
    site_packages: SitePackages, argv: list[str]
) -> None:
    site = site_packages(("sglang", "0.5.10", [p.targets[0].path for p in SGLANG_PATCHES]))
    before = _snapshot(site)
    for patch in (
        SGLANG_CUTLASS_MOE_FP4_EP,
        SGLANG_MODELOPT_EP_INPUT_SCALE,
        SGLANG_MOE_WNA16_QZEROS_EP,
    ):
        report = _run(patch, site, argv=argv)
        assert report.status == NOT_APPLICABLE
        assert "--ep-size=1 (applies when --ep-size > 1)" in report.outcomes[0].detail
    assert _snapshot(site) == before
    # the EP-independent JIT patch still applies
    assert _run(SGLANG_JIT_ARCH, site, argv=argv).status == APPLIED


@pytest.mark.parametrize("argv", [["--ep", "2"], ["--expert-parallel-size=4"], ["--ep-size", "8"]])
def test_ep_flag_aliases(site_packages: SitePackages, argv: list[str]) -> None:
    site = site_packages(("sglang", "0.5.10", [SGLANG_MOE_WNA16_QZEROS_EP.targets[0].path]))
    assert _run(SGLANG_MOE_WNA16_QZEROS_EP, site, argv=argv).status == APPLIED


def test_model_architecture_filter(site_packages: SitePackages) -> None:
    site = site_packages(("sglang", "0.5.12", [SGLANG_JIT_ARCH.targets[0].path]))
    only_nemotron = dataclasses.replace(SGLANG_JIT_ARCH, archs=("NemotronH*",))
    report = _run(only_nemotron, site, arch="Qwen3_5MoeForConditionalGeneration")
    assert report.status == NOT_APPLICABLE
    assert "Qwen3_5MoeForConditionalGeneration not in NemotronH*" in report.line()
    assert _run(only_nemotron, site, arch="NemotronHForCausalLM").status == APPLIED


def test_cutlass_both_copies_and_missing_packages(site_packages: SitePackages) -> None:
    lib, fi = (c for c in _cutlass_copies() if c.version in ("4.5.2", "0.6.12"))
    site = site_packages((lib.dist, lib.version, lib.members), (fi.dist, fi.version, fi.members))
    report = _run(CUTLASS_DSL_SM121, site)
    assert [o.status for o in report.outcomes] == [APPLIED, APPLIED]
    assert report.status == APPLIED
    # only sglang installed: both CUTLASS targets are not applicable, nothing is claimed
    bare = site.parent / "bare"
    bare.mkdir()
    report = run_patch(CUTLASS_DSL_SM121, [bare], model_arch="X", server_argv=[], write=True)
    assert [o.status for o in report.outcomes] == [NOT_APPLICABLE, NOT_APPLICABLE]
    assert "not installed" in report.line()


def test_installed_package_without_the_file_is_drift(site_packages: SitePackages) -> None:
    copy = next(c for c in _cutlass_copies() if c.version == "0.6.8.post1")
    site = _build(site_packages, copy)
    (site / copy.target).unlink()
    outcome = _only(_run(CUTLASS_DSL_SM121, site), copy.target)
    assert outcome.status == DRIFT and "file is missing" in outcome.detail


def test_cutlass_prerequisite_arch_enum(site_packages: SitePackages) -> None:
    copy = next(c for c in _cutlass_copies() if c.version == "4.4.2")
    site = _build(site_packages, copy)
    arch = site / copy.extra[0]
    arch.write_text(arch.read_text().replace("sm_121a = (12, 1", "sm_121x = (12, 1"))
    before = _snapshot(site)
    outcome = _only(_run(CUTLASS_DSL_SM121, site), copy.target)
    assert outcome.status == DRIFT and "prerequisite missing" in outcome.detail
    assert _snapshot(site) == before


def test_cutlass_fixed_upstream_is_not_applicable(site_packages: SitePackages) -> None:
    copy = next(c for c in _cutlass_copies() if c.version == "0.6.11.post1")
    site = _build(site_packages, copy)
    path = site / copy.target
    anchor = CUTLASS_DSL_SM121.hunks[0].anchor
    upstream = anchor.replace(
        "        Arch.sm_103a,\n", "        Arch.sm_103a,\n        Arch.sm_121a,\n"
    )
    path.write_text(path.read_text().replace(anchor, upstream))
    outcome = _only(_run(CUTLASS_DSL_SM121, site), copy.target)
    assert outcome.status == NOT_APPLICABLE and "fixed upstream" in outcome.detail


def test_editable_install_source_checkout(site_packages: SitePackages, tmp_path: Path) -> None:
    """pip install -e: the dist-info is in site-packages, the code in a checkout named by a .pth."""
    site = site_packages(("sglang", "0.5.13", [SGLANG_JIT_ARCH.targets[0].path]))
    checkout = tmp_path / "sgl-workspace" / "python"
    checkout.mkdir(parents=True)
    shutil.move(site / "sglang", checkout / "sglang")
    (site / "__editable__.sglang-0.5.13.pth").write_text(f"{checkout}\n")
    assert _run(SGLANG_JIT_ARCH, site).status == DRIFT  # the file is not under site-packages
    report = run_patch(
        SGLANG_JIT_ARCH, expand_roots([site]), model_arch="X", server_argv=[], write=True
    )
    assert report.status == APPLIED
    assert SGLANG_JIT_ARCH.marker in (checkout / SGLANG_JIT_ARCH.targets[0].path).read_text()


# ---------------------------------------------------------------------------------------------
# Versions


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("0.5.13.dev0", ">=0.5.10,<0.5.16", True),
        ("0.5.13rc1", ">=0.5.10,<0.5.16", True),
        ("0.5.16", ">=0.5.10,<0.5.16", False),
        ("0.5.16.dev3+g1234abc", ">=0.5.10,<0.5.16", True),
        ("0.5.9.post2", ">=0.5.10", False),
        ("0.5.10.post1", ">=0.5.10,<0.5.16", True),
        ("0.6.7.post2", ">=0.6.7", True),
        ("4.5", ">=4.4.0", True),
    ],
)
def test_version_ranges(version: str, spec: str, expected: bool) -> None:
    assert version_in(version, spec) is expected


def test_version_order() -> None:
    order = ["1.0.dev1", "1.0a1", "1.0b2", "1.0rc1", "1.0", "1.0.post1", "1.0.1"]
    assert sorted(order, key=version_key) == order
    with pytest.raises(ValueError):
        version_key("not-a-version")
