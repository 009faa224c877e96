"""A model switch as manifests: the fetch Job, receivers, the ranks' init containers (weights
marker, free memory), the offline env, the JIT-cache mounts per engine, the image pre-pull.
Every object validates against the Kubernetes schemas; the figures come from the planner."""

from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack import contract
from sparkrack.errors import SparkrackError
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s.validate import validate_manifests
from sparkrack.planner.memory import GB
from sparkrack.serving import (
    ServingContext,
    context_from_vars,
    engine_of,
    load_profile,
    render_manifests,
    resolve,
)
from sparkrack.serving.deployments.bundle import from_inventory, render_serving
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.profile.capacity import plan_profile, planned_gb
from sparkrack.serving.profile.images import image_slug
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.resolution import DISK_MARGIN
from sparkrack.serving.switch import plan as fetchplan
from sparkrack.serving.switch.objects import fetch_objects, prepull_jobs, switch_objects
from sparkrack.serving.switch.plan import SCRIPT_PATH, pf_address

SGLANG = "nemotron-3-super-120b-a12b-nvfp4"
VLLM = "nemotron-3-super-120b-a12b-nvfp4-vllm"
TRTLLM = "nemotron-3-super-120b-a12b-nvfp4-trtllm"
REVISION = "89abcdef0123456789abcdef0123456789abcdef"
DIGEST = "sha256:" + "fedcba9876543210" * 4


COPIER = f"registry.example/fetch:1.0@{DIGEST}"


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    plan = load_inventory("inventories/example").plan()
    return context_from_vars(plan, {"serving_fetch_image": COPIER})


def kind(docs: list[dict[str, Any]], k: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == k]


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def pinned(name: str, **changes: Any) -> Profile:
    profile = load_profile(name)
    data = copy.deepcopy(profile.data)
    data.update(changes)
    return Profile(profile.name, profile.path, data)


def test_fetch_job_downloads_on_the_head_and_pushes_to_the_other_pf_addresses(
    ctx: ServingContext,
) -> None:
    profile = pinned(SGLANG, revision=REVISION)
    docs = fetch_objects(resolve(profile, ctx))
    assert validate_manifests(docs, source="switch") == []
    fetch, *receivers = kind(docs, "Job")
    head, *others = ctx.plan.nodes
    spec = fetch["spec"]
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"][contract.HOSTNAME_LABEL] == head.name
    assert pod["hostNetwork"] is True and pod["restartPolicy"] == "Never"
    assert 0 < spec["backoffLimit"] <= 3
    assert ctx.fetch_timeout < spec["activeDeadlineSeconds"] <= ctx.fetch_timeout + 3600
    [download] = pod["initContainers"]
    [push] = pod["containers"]
    argv = download["command"]
    assert argv[:3] == ["python3", str(SCRIPT_PATH), "download"]
    assert option(argv, "--repo") == profile.model
    assert option(argv, "--revision") == REVISION
    assert option(argv, "--cache") == contract.HF_HUB_CACHE_MOUNT
    # Free disk asked: the checkpoint (67 GB, src:super-mtp-post) and a margin, never less.
    assert 67e9 < int(option(argv, "--need-bytes")) < 67e9 * 1.2
    # The HF token: a Secret reference on the downloading container only, never a value.
    [token] = [e for e in download["env"] if e["name"] == "HF_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"]["name"] == ctx.hf_token_secret
    assert "HF_TOKEN" not in str(push) and "hf_" not in str(argv)
    assert push["command"][:3] == ["python3", str(SCRIPT_PATH), "push"]
    assert option(push["command"], "--to").split(",") == [pf_address(ctx.plan, n) for n in others]
    res = resolve(profile, ctx)
    port = fetchplan.deployment_port(ctx.fetch_port, res.name)
    assert ctx.fetch_port <= port < ctx.fetch_port + fetchplan.PORT_SPAN
    assert option(push["command"], "--port") == str(port)
    # One receiver per other Spark, on the host network (the PF address), bounded alike, taking
    # connections from the head's PF address only, with the deployment's own Secret.
    assert [
        r["spec"]["template"]["spec"]["nodeSelector"][contract.HOSTNAME_LABEL] for r in receivers
    ] == [n.name for n in others]
    for job in receivers:
        rpod = job["spec"]["template"]["spec"]
        [receive] = rpod["containers"]
        assert rpod["hostNetwork"] is True
        assert receive["command"][:3] == ["python3", str(SCRIPT_PATH), "receive"]
        assert option(receive["command"], "--port") == str(port)
        assert receive["ports"] == [{"name": "rsync", "containerPort": port}]
        assert option(receive["command"], "--allow") == pf_address(ctx.plan, head)
        secret = next(v for v in rpod["volumes"] if "secret" in v)["secret"]
        assert secret == {"secretName": f"{ctx.fetch_secret}-{res.name}", "defaultMode": 0o400}
        assert job["spec"]["activeDeadlineSeconds"] == spec["activeDeadlineSeconds"]
    # The script is shipped verbatim in a ConfigMap, removed with its deployment (serving label).
    [cm] = kind(docs, "ConfigMap")
    assert cm["data"] == fetchplan.script_files()
    assert list(cm["data"]) == [
        contract.FETCH_FILE,
        "fetch_base.py",
        "fetch_daemon.py",
        "fetch_receive.py",
        "fetch_relay.py",
        "fetch_push.py",
        "memsettle.py",
    ]
    assert cm["metadata"]["labels"][contract.LABEL_COMPONENT] == contract.COMPONENT_SERVING


def test_the_pf_addresses_are_the_plans_first_rail(ctx: ServingContext) -> None:
    for node in ctx.plan.nodes:
        port = next(p for p in node.ports if p.name == ctx.plan.sriov_port)
        assert pf_address(ctx.plan, node) == port.address
        assert port.address not in {vf.address for vf in node.vfs}


def test_two_deployments_of_one_model_get_their_own_port_and_secret(ctx: ServingContext) -> None:
    """Two deployments of one model sharing Sparks: receivers on different ports, own Secrets."""
    profile = pinned(SGLANG, revision=REVISION)
    a = resolve(profile, dataclasses.replace(ctx, deployment="chat-a"))
    b = resolve(profile, dataclasses.replace(ctx, deployment="chat-b"))
    ports = {fetchplan.fetch_plan(r).port for r in (a, b)}
    assert len(ports) == 2
    facts = [switch_objects(r).facts for r in (a, b)]
    assert {f["fetch_port"] for f in facts} == ports
    assert [f["fetch_secret"] for f in facts] == [
        f"{ctx.fetch_secret}-chat-a",
        f"{ctx.fetch_secret}-chat-b",
    ]
    # The same name always gets the same port (a rerun renders the same Jobs).
    assert fetchplan.deployment_port(8873, "chat-a") == fetchplan.deployment_port(8873, "chat-a")


def test_a_single_spark_engine_downloads_without_push_or_receivers(ctx: ServingContext) -> None:
    docs = fetch_objects(resolve(load_profile(VLLM), ctx))
    [fetch] = kind(docs, "Job")
    # Nothing pushed over the fabric: the download Job stays off the host's network.
    assert "hostNetwork" not in fetch["spec"]["template"]["spec"]
    pod = fetch["spec"]["template"]["spec"]
    assert [c["command"][2] for c in pod["containers"]] == ["download"]
    assert "initContainers" not in pod
    # No revision pinned: the fetch step resolves main (and records the commit in its marker).
    assert option(pod["containers"][0]["command"], "--revision") == "main"


@pytest.mark.parametrize("name", [SGLANG, VLLM, TRTLLM])
def test_every_rank_waits_for_the_weights_and_its_memory_then_runs_offline(
    name: str, ctx: ServingContext
) -> None:
    profile = load_profile(name)
    docs = render_manifests(profile, ctx)
    assert validate_manifests([*fetch_objects(resolve(profile, ctx)), *docs], source=name) == []
    ranks = engine_of(profile.data).ranks(ctx)
    sets = kind(docs, "StatefulSet")
    assert len(sets) == len(ranks)
    gb = planned_gb(profile, len(ranks))
    for sts in sets:
        pod = sts["spec"]["template"]["spec"]
        wait, memwait = pod["initContainers"][:2]
        assert wait["command"][:3] == ["python3", str(SCRIPT_PATH), "wait"]
        assert option(wait["command"], "--repo") == profile.model
        assert option(wait["command"], "--revision") == "main"
        assert memwait["command"][:3] == ["python3", str(SCRIPT_PATH), "memwait"]
        # The planner's footprint per Spark (the deployments' memory table), rounded up.
        need = float(option(memwait["command"], "--need-gb"))
        assert gb <= need < gb + 0.1 and need > 10
        assert option(memwait["command"], "--timeout") == str(ctx.memwait_timeout)
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["HF_HUB_OFFLINE"] == "1"
        # The engine's own init containers (vLLM's plugin copy) run after the marker, offline;
        # the settle sidecar comes last, right before the engine, and flushes while it loads.
        *extras, settle = pod["initContainers"][2:]
        for extra in extras:
            assert {"name": "HF_HUB_OFFLINE", "value": "1"} in extra["env"]
        assert settle["name"] == "settle" and settle["restartPolicy"] == "Always"
        assert settle["command"][:3] == ["python3", f"{SCRIPT_PATH.parent}/memsettle.py", "hold"]
        assert option(settle["command"], "--max-s") == str(ctx.startup_timeout)


def test_a_pinned_revision_reaches_the_wait_and_the_marker(ctx: ServingContext) -> None:
    profile = pinned(SGLANG, revision=REVISION)
    sts = kind(render_manifests(profile, ctx), "StatefulSet")[0]
    wait = sts["spec"]["template"]["spec"]["initContainers"][0]
    assert option(wait["command"], "--revision") == REVISION
    assert (
        option(sts["spec"]["template"]["spec"]["containers"][0]["args"], "--revision") == REVISION
    )


def test_memwait_follows_the_plan_not_a_constant(ctx: ServingContext) -> None:
    low = pinned(SGLANG, sglang={**load_profile(SGLANG).data["sglang"], "mem_fraction_static": 0.6})
    high = load_profile(SGLANG)

    def need(p: Profile) -> float:
        sts = kind(render_manifests(p, ctx), "StatefulSet")[0]
        return float(
            option(sts["spec"]["template"]["spec"]["initContainers"][1]["command"], "--need-gb")
        )

    assert need(low) < need(high)


@pytest.mark.parametrize("name", [SGLANG, VLLM, TRTLLM])
def test_jit_caches_live_on_the_node_per_image_apart_from_the_hf_cache(
    name: str, ctx: ServingContext
) -> None:
    profile = load_profile(name)
    eng = engine_of(profile.data)
    assert eng.jit_caches, name
    sts = kind(render_manifests(profile, ctx), "StatefulSet")[0]
    pod = sts["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "jit-cache"]
    path = volume["hostPath"]["path"]
    assert path == f"{ctx.jit_cache}/{image_slug(profile.image)}"
    assert not path.startswith(ctx.hf_cache) and not ctx.hf_cache.startswith(path)
    container = pod["containers"][0]
    assert {"name": "jit-cache", "mountPath": contract.JIT_CACHE_MOUNT} in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    for cache in eng.jit_caches:
        assert env[cache.env] == f"{contract.JIT_CACHE_MOUNT}/{cache.name}"
    # Another image (a digest of the same tag included) gets another directory.
    other = pinned(name, image=f"{profile.image}@{DIGEST}")
    sts2 = kind(render_manifests(other, ctx), "StatefulSet")[0]
    [v2] = [v for v in sts2["spec"]["template"]["spec"]["volumes"] if v["name"] == "jit-cache"]
    assert v2["hostPath"]["path"] != path and DIGEST.split(":")[1] in v2["hostPath"]["path"]


def test_each_engine_names_the_caches_the_brief_lists() -> None:
    envs = {name: {c.env for c in eng.jit_caches} for name, eng in ENGINES.items()}
    assert {"FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"} <= (
        envs["sglang"] & envs["vllm"] & envs["trtllm"]
    )
    assert {"CUTE_DSL_CACHE_DIR", "DG_JIT_CACHE_DIR"} <= envs["sglang"]
    assert "VLLM_CACHE_ROOT" in envs["vllm"] and "VLLM_CACHE_ROOT" not in envs["sglang"]


def test_prepull_is_off_by_default_and_pulls_every_image_per_spark_when_on() -> None:
    serving = from_inventory("inventories/lab")
    rendered = render_serving(serving)
    assert rendered["prepull"] == []
    assert rendered["switch"]["order"] == ["prepull", "fetch", "manifests"]
    on = dataclasses.replace(serving.ctx, prepull=True)
    jobs = prepull_jobs([d.res for d in serving.deployments], on)
    assert validate_manifests(jobs, source="prepull") == []
    by_node = {
        j["spec"]["template"]["spec"]["nodeSelector"][contract.HOSTNAME_LABEL]: j for j in jobs
    }
    assert sorted(by_node) == sorted({s for d in serving.deployments for s in d.sparks})
    for d in serving.deployments:
        for spark in d.sparks:
            pod = by_node[spark]["spec"]["template"]["spec"]
            images = [c["image"] for c in pod["containers"]]
            assert d.profile.image in images and on.fetch_image in images
            # No GPU asked: the old model keeps serving while the image downloads.
            assert all("resources" not in c for c in pod["containers"])
    for job in jobs:
        assert job["spec"]["activeDeadlineSeconds"] > on.prepull_timeout
        assert job["metadata"]["labels"][contract.LABEL_COMPONENT] == contract.COMPONENT_PREPULL


def test_render_serving_returns_the_switch_stages_and_facts() -> None:
    serving = from_inventory("inventories/lab")
    rendered = render_serving(serving)
    jobs = kind(rendered["fetch"], "Job")
    assert validate_manifests(rendered["fetch"], source="lab") == []
    assert all(j["metadata"]["labels"][contract.LABEL_COMPONENT] == "fetch" for j in jobs)
    assert not [d for d in rendered["manifests"] if d["kind"] == "Job"]
    gemma = next(d for d in rendered["deployments"] if d["name"] == "gemma")
    assert gemma["fetch_job"] in {j["metadata"]["name"] for j in jobs}
    assert len(gemma["receiver_jobs"]) == 1 and gemma["revision"] == "main"
    assert gemma["marker"].startswith(contract.HF_HUB_CACHE_MOUNT + "/.sparkrack/models--")
    profile = serving.deployment("gemma").profile
    weights = profile.data["model_info"].get("weights_gb") or plan_profile(profile).weights_total_gb
    assert gemma["need_bytes"] == int(float(weights) * GB * (1 + DISK_MARGIN))
    # One read lists every pre-pull and fetch Job, and the timeline's one read their pods and
    # the ranks'.
    assert rendered["switch"]["jobs_selector"] == "sparkrack.io/component in (prepull,fetch)"
    assert rendered["switch"]["timeline_pods_selector"] == (
        "sparkrack.io/component in (fetch,serving)"
    )


def test_object_names_fit_kubernetes_limits() -> None:
    long = context_from_vars(load_inventory("inventories/example").plan(), {})
    long = dataclasses.replace(long, deployment="d" * 40)
    for doc in fetch_objects(resolve(load_profile(SGLANG), long)):
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]


@pytest.mark.parametrize(
    ("value", "on"),
    [(True, True), ("true", True), ("yes", True), (False, False), ("false", False), (None, False)],
)
def test_the_prepull_switch_reads_yaml_and_extra_vars_spellings(value: object, on: bool) -> None:
    plan = load_inventory("inventories/example").plan()
    assert context_from_vars(plan, {"serving_prepull": value}).prepull is on


def test_render_prints_prepull_then_fetch_then_the_deployments(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    import yaml

    from sparkrack.cli import main

    inv = tmp_path / "inv"
    shutil.copytree("inventories/lab", inv)
    group_vars = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text())
    data["serving_prepull"] = True
    group_vars.write_text(yaml.safe_dump(data))
    assert main(["render", "-i", str(inv), "--what", "manifests"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    component = [d["metadata"]["labels"].get(contract.LABEL_COMPONENT) for d in docs]
    kinds = [d["kind"] for d in docs]
    prepull = [i for i, c in enumerate(component) if c == "prepull"]
    fetch = [i for i, c in enumerate(component) if c == "fetch"]
    switch_cms = [i for i, d in enumerate(docs) if d["metadata"]["name"].endswith("-switch")]
    # The two namespaces come first, then the pre-pull Jobs.
    assert kinds[:2] == ["Namespace", "Namespace"]
    assert len(prepull) == 4 and prepull == list(range(2, 6))
    assert max(prepull) < min(switch_cms) < min(fetch)
    assert max(fetch) < kinds.index("StatefulSet")


def test_a_digest_only_image_renders_validates_and_maps_to_its_release(
    ctx: ServingContext,
) -> None:
    from sparkrack.serving import validate_profile

    image = f"scitrera/dgx-spark-sglang@{DIGEST}"
    profile = pinned("glm-4.7-nvfp4", image=image, image_info={"sglang": "0.5.10", "cudnn": True})
    assert validate_profile(profile.data, "g.yml", nodes=4) == []
    docs = [*fetch_objects(resolve(profile, ctx)), *render_manifests(profile, ctx)]
    assert validate_manifests(docs, source="digest") == []
    sts = kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]
    assert {c["image"] for c in [*sts["containers"], *sts["initContainers"]]} == {image}
    # The engine check runs the release the profile states for the digest.
    assert engine_of(profile.data).upstream_version(profile) == "0.5.10"


def test_a_deployment_across_sparks_needs_a_copy_image(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    shutil.copytree("inventories/lab", inv)
    group_vars = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text())
    data["serving_fetch_image"] = ""
    group_vars.write_text(yaml.safe_dump(data))
    with pytest.raises(SparkrackError, match="serving_fetch_image: is not set; gemma copy"):
        from_inventory(str(inv))
    # single-Spark deployments copy nothing: no image needed
    data["serving_deployments"] = [d for d in data["serving_deployments"] if len(d["sparks"]) == 1]
    group_vars.write_text(yaml.safe_dump(data))
    assert len(from_inventory(str(inv)).deployments) == 2


def test_the_engine_image_downloads_and_the_copy_image_pushes() -> None:
    serving = from_inventory("inventories/lab")
    gemma = next(d for d in serving.deployments if len(d.sparks) > 1)
    docs = fetch_objects(gemma.res)
    fetch = next(d for d in docs if d["kind"] == "Job" and "receive" not in d["metadata"]["name"])
    spec = fetch["spec"]["template"]["spec"]
    assert spec["initContainers"][0]["image"] == gemma.profile.image
    assert spec["containers"][0]["image"] == serving.ctx.fetch_image


def test_the_push_and_the_receivers_use_every_rail_of_the_plan() -> None:
    """Lab inventory (two rails): one --to per rail, each receiver listens on its PF address of
    every rail and takes the head's address of every rail only."""
    serving = from_inventory("inventories/lab")
    plan = serving.ctx.plan
    assert len(plan.rails) == 2
    gemma = next(d for d in serving.deployments if len(d.sparks) > 1)
    head, *others = gemma.res.nodes
    fetch, *receivers = kind(fetch_objects(gemma.res), "Job")
    argv = fetch["spec"]["template"]["spec"]["containers"][0]["command"]
    tos = [argv[i + 1] for i, a in enumerate(argv) if a == "--to"]
    assert tos == [",".join(fetchplan.rail_addresses(plan, n)[r] for n in others) for r in range(2)]
    assert tos[0].split(",") == [pf_address(plan, n) for n in others]
    for node, job in zip(others, receivers, strict=True):
        receive = job["spec"]["template"]["spec"]["containers"][0]["command"]
        bound = [receive[i + 1] for i, a in enumerate(receive) if a == "--address"]
        assert bound == [p.address for r in plan.rails for p in node.ports if p.name == r]
        assert option(receive, "--allow").split(",") == list(fetchplan.rail_addresses(plan, head))
    assert switch_objects(gemma.res).facts["copy_rails"] == [t.split(",") for t in tos]


def _colliding(name: str, base: int) -> str:
    """Another deployment name whose own port (from its name alone) is ``name``'s."""
    want = fetchplan.deployment_port(base, name)
    return next(
        f"{name}-{i}"
        for i in range(100_000)
        if fetchplan.deployment_port(base, f"{name}-{i}") == want
    )


def test_colliding_fetch_ports_of_deployments_sharing_a_spark_are_resolved(tmp_path: Path) -> None:
    """Two names whose ports collide: on a shared Spark the one that sorts later takes the next
    free port, rendered into its receivers and push; on Sparks of their own both keep theirs."""
    base = 8873
    other = _colliding("gemma", base)
    own = fetchplan.deployment_port(base, "gemma")
    # Negative control: derived from the names alone, the two ports are one.
    assert fetchplan.deployment_port(base, other) == own
    shared = fetchplan.deployment_ports(base, [(other, ["s2", "s3"]), ("gemma", ["s1", "s2"])])
    assert shared == {"gemma": own, other: own + 1}
    apart = fetchplan.deployment_ports(base, [(other, ["s3", "s4"]), ("gemma", ["s1", "s2"])])
    assert apart == {"gemma": own, other: own}
    # The span wraps: a collision on the last port of the span goes to the first.
    last = base + fetchplan.PORT_SPAN - 1
    names = [f"d{i}" for i in range(5000)]
    at_last = [n for n in names if fetchplan.deployment_port(base, n) == last][:2]
    wrapped = fetchplan.deployment_ports(base, [(n, ["s1"]) for n in at_last])
    assert sorted(wrapped.values()) == [base, last]
    # End to end through the inventory: the rendered receivers listen on different ports.
    inv = tmp_path / "inv"
    shutil.copytree("inventories/lab", inv)
    group_vars = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text())
    gemma = data["serving_deployments"][0]
    second = {**gemma, "name": other, "alias": "gemma-2", "sparks": ["spark2", "spark3"], "vf": 1}
    data["serving_deployments"] = [gemma, second]
    data["fabric"]["vfs_in_use"] = [0, 1]
    group_vars.write_text(yaml.safe_dump(data))
    serving = from_inventory(str(inv), check_memory=False)
    ports = {d.name: switch_objects(d.res).facts["fetch_port"] for d in serving.deployments}
    assert ports == {"gemma": own, other: own + 1}
    for d in serving.deployments:
        for job in kind(fetch_objects(d.res), "Job"):
            [c] = job["spec"]["template"]["spec"]["containers"]
            if c["command"][2] in ("push", "receive"):
                assert option(c["command"], "--port") == str(ports[d.name])


def test_slow_rails_render_a_chain_each_receiver_taking_from_the_one_before() -> None:
    """Rails of 1 Gbit/s (the head's rails would carry three copies): the estimate picks the
    chain. The head pushes to the first peer only; each receiver allows the Spark before it
    only and relays to the one after (the password key of the deployment's Secret, its hop's
    phase records); the last relays nothing. The default rates render the fan-out."""
    plan = load_inventory("inventories/example").plan()
    slow = context_from_vars(plan, {"serving_fetch_image": COPIER, "serving_rail_mbit_s": 1_000})
    res = resolve(pinned(SGLANG, revision=REVISION), slow)
    assert fetchplan.shape_of(res) == "chain"
    docs = fetch_objects(res)
    assert validate_manifests(docs, source="switch") == []
    fetch, *receivers = kind(docs, "Job")
    head, *others = res.nodes
    assert len(others) >= 2
    push = fetch["spec"]["template"]["spec"]["containers"][0]["command"]
    assert [push[i + 1] for i, a in enumerate(push) if a == "--to"] == [pf_address(plan, others[0])]
    chain = [head, *others]
    for k, job in enumerate(receivers):
        argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert option(argv, "--allow") == pf_address(plan, chain[k])
        relays = [argv[i + 1] for i, a in enumerate(argv) if a == "--relay-to"]
        if k + 1 < len(others):
            assert relays == [pf_address(plan, others[k + 1])]
            assert option(argv, "--relay-password-file") == (
                f"{contract.FETCH_SECRET_MOUNT}/{fetchplan.PASSWORD_KEY}"
            )
            assert option(argv, "--phases") == contract.PHASE_FILE
        else:
            assert relays == [] and "--relay-password-file" not in argv and "--phases" not in argv
    facts = switch_objects(res).facts
    assert facts["copy_shape"] == "chain"
    assert facts["copy_to"] == [pf_address(plan, n) for n in others]
    assert [p["phase"] for p in facts["predicted"]].count("relay") == 1
    # Negative control: the default rates keep the fan-out.
    fast = resolve(
        pinned(SGLANG, revision=REVISION), context_from_vars(plan, {"serving_fetch_image": COPIER})
    )
    assert fetchplan.shape_of(fast) == "fan-out"
    fetch, *receivers = kind(fetch_objects(fast), "Job")
    push = fetch["spec"]["template"]["spec"]["containers"][0]["command"]
    assert option(push, "--to").split(",") == [pf_address(plan, n) for n in others]
    for job in receivers:
        argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert option(argv, "--allow") == pf_address(plan, head) and "--relay-to" not in argv
