"""The SGLang rank's rendered start: the GID resolver first, on the env the rank is rendered with,
then the launcher; the resolver ships in the launcher ConfigMap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sparkrack import contract
from sparkrack.fabric import gidtable
from sparkrack.patches import container_entrypoint, handed_keys
from sparkrack.serving.context import context_from_inventory
from sparkrack.serving.engines.base import Rank
from sparkrack.serving.engines.sglang import ENGINE, launcher_files
from sparkrack.serving.profile.load import load_profile

PROFILE = "glm-4.7-nvfp4"


def test_the_resolver_runs_before_the_launcher_and_ships_with_it() -> None:
    profile = load_profile(PROFILE)
    head = ENGINE.ranks(context_from_inventory("inventories/example"))[0]
    command, args = ENGINE.container_command(
        profile, ["python3", "-m", "sglang.launch_server"], head
    )
    resolver = ["python3", "-I", f"{contract.LAUNCHER_MOUNT}/gidtable.py", "--"]
    assert command[: len(resolver)] == resolver
    launcher = container_entrypoint(profile.patches, profile.architecture)
    # The launcher, with the keys it hands the server (patches.handed_keys) before its "--".
    keys = [w for var, flag in handed_keys(command).items() for w in ("--key-env", f"{var}={flag}")]
    assert command[len(resolver) :] == [*launcher[:-1], *keys, launcher[-1]]
    assert set(handed_keys(command)) == set(ENGINE.rank_key_env(0))
    assert args == ["python3", "-m", "sglang.launch_server"]
    assert launcher_files()["gidtable.py"] == Path(gidtable.__file__).read_text()


def test_the_rendered_rank_env_resolves_on_its_own_table(tmp_path: Path) -> None:
    """Rank 1's rendered env, its VF's table with the IPv4 RoCE v2 entry moved to slot 4."""
    profile = load_profile(PROFILE)
    ctx = context_from_inventory("inventories/example")
    rank = ENGINE.ranks(ctx)[1]
    env = ENGINE.env(profile, ctx, Rank(rank.rank, rank.node))
    assert "NCCL_IB_GID_INDEX" not in env
    (vf,) = rank.node.rail_vfs(ctx.plan.serving_vf_index)
    base = tmp_path / vf.rdma_device / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True)
    mapped = gidtable.ipv4_gid(vf.address)
    for index, (gid, kind) in {3: (mapped, "IB/RoCE v1"), 4: (mapped, "RoCE v2")}.items():
        (base / "gids" / str(index)).write_text(gid + "\n")
        (base / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (base / "gid_attrs" / "ndevs" / str(index)).write_text("net1\n")
    show = "import os; print('INDEX', os.environ['NCCL_IB_GID_INDEX'])"
    done = subprocess.run(
        [sys.executable, "-I", gidtable.__file__, "--", sys.executable, "-c", show],
        env={**env, "PATH": os.environ["PATH"], gidtable.ROOT_ENV: str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "INDEX 4" in done.stdout
