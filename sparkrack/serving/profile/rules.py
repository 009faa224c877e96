"""Validation rules every profile goes through, whatever its engine, and the one entry point.

A rule yields :class:`Problem` s ``<file>: <key>: <message> — fix: <fix> [<rule-id>]``. The rules
here are engine-agnostic (topology arithmetic, the ``extra_args``/``env`` escape hatches, patch
ids, the capacity planner); each engine's seed traps live in its own module under ``engines/``
and run after these.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, shown
from sparkrack.inputs.imageref import is_moving_tag
from sparkrack.planner.memory import RULE_CONTEXT, RULE_POOL, RULE_STARTUP, RULE_WEIGHTS
from sparkrack.serving.engines import ENGINES, Engine, engine_of
from sparkrack.serving.engines.extra_args import EXTRA_ARGS_CLASS_RULES, RULE_EXTRA_NOT_ALLOWED
from sparkrack.serving.profile.capacity import capacity_problems
from sparkrack.serving.profile.load import schema_problems
from sparkrack.serving.profile.ruleset import Ctx, Rule, RuleSet

# Environment the renderer owns; a profile's `env` may not set these.
OWNED_ENV = (
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_DEBUG",
    "NCCL_NET",
    "NCCL_IB_DISABLE",
    "HF_TOKEN",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "POD_FABRIC_IFNAME",
    contract.POD_IP_ENV,
    contract.ENGINE_KEY_ENV,
    contract.ADMIN_KEY_ENV,
)

# Variables a shared profile may not set, with the reason: they would send the HF token to another
# host, inject code into the server process, or override the fabric settings sparkrack renders.
DENIED_ENV: tuple[tuple[str, str], ...] = (
    ("HF_ENDPOINT", "points the Hugging Face client, and with it the HF token, at another host"),
    ("HF_TOKEN", "a secret: it comes from the Kubernetes Secret"),
    ("HUGGING_FACE_HUB_TOKEN", "a secret: the HF token comes from the Kubernetes Secret"),
    ("VLLM_API_KEY", "a secret: the engine key comes from the deployment's key Secret"),
    ("VLLM_SERVER_DEV_MODE", "opens vLLM's development routes, which no key guards"),
    (
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "lets a client load adapter weights from a path or repo it names (/v1/load_lora_adapter)",
    ),
    ("VLLM_USE_MODELSCOPE", "downloads models from ModelScope, another host than the fetch step's"),
    ("HTTP_PROXY", "routes the server's downloads (and the HF token) through another host"),
    ("HTTPS_PROXY", "routes the server's downloads (and the HF token) through another host"),
    ("ALL_PROXY", "routes the server's downloads (and the HF token) through another host"),
    ("REQUESTS_CA_BUNDLE", "trusts another CA for the HF download: the token can be intercepted"),
    ("SSL_CERT_FILE", "trusts another CA for the HF download: the token can be intercepted"),
    ("CURL_CA_BUNDLE", "trusts another CA for the HF download: the token can be intercepted"),
    ("LD_PRELOAD", "loads foreign code into the server process"),
    ("LD_LIBRARY_PATH", "loads foreign libraries into the server process"),
    ("PYTHONPATH", "imports foreign code before the engine's own"),
    ("PYTHONSTARTUP", "runs foreign code in the server's interpreter"),
    ("PYTHONHOME", "replaces the image's Python"),
    ("PYTHONUSERBASE", "imports foreign code from a user site directory"),
    ("NCCL_CONF_FILE", "loads NCCL settings from a file, past the fabric env sparkrack renders"),
    ("NCCL_TOPO_FILE", "replaces NCCL's view of the fabric sparkrack configured"),
    ("NCCL_NET_PLUGIN", "loads a foreign NCCL network plugin"),
    ("NCCL_IB_*", "a fabric setting: sparkrack renders the RoCE env from the address plan"),
    ("NCCL_SOCKET_*", "a fabric setting: sparkrack renders the interface from the address plan"),
    ("GLOO_*", "a fabric setting: sparkrack renders the interface from the address plan"),
    ("*_TOKEN", "looks like a secret: secrets come from Kubernetes Secrets, never a profile"),
    ("*_API_KEY", "looks like a secret: secrets come from Kubernetes Secrets, never a profile"),
    ("*SECRET*", "looks like a secret: secrets come from Kubernetes Secrets, never a profile"),
    ("*PASSWORD*", "looks like a secret: secrets come from Kubernetes Secrets, never a profile"),
)


def denied_env(name: str) -> str | None:
    """The reason ``name`` may not be set by a profile, or None."""
    for pattern, reason in DENIED_ENV:
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


RULES = RuleSet()


@RULES.add(
    "topology-ep-divides-tp", "SGLang ServerArgs (ep_size must divide tp_size)", "ep must divide tp"
)
def _ep(c: Ctx) -> Iterator[Problem]:
    if c.tp % c.ep:
        yield c.p(
            "topology.ep",
            f"ep={c.ep} does not divide tp={c.tp}",
            f"use an ep from {[d for d in range(1, c.tp + 1) if c.tp % d == 0]}",
            "topology-ep-divides-tp",
        )
    if c.ep > 1 and not c.moe:
        yield c.p(
            "topology.ep",
            f"ep={c.ep} on a model without routed experts",
            "set ep: 1 (expert parallelism needs an MoE model)",
            "topology-ep-divides-tp",
        )


@RULES.add(
    "topology-tp-heads",
    "tensor parallelism shards attention heads",
    "tp must divide the attention heads",
)
def _heads(c: Ctx) -> Iterator[Problem]:
    heads = int(c.info("attention_heads", 0) or 0)
    if heads and heads % c.tp:
        yield c.p(
            "topology.tp",
            f"tp={c.tp} does not divide the {heads} attention heads of {c.arch}",
            f"use a tp that divides {heads}",
            "topology-tp-heads",
        )


@RULES.add(
    "topology-kv-heads",
    "tensor parallelism shards or replicates KV heads",
    "KV heads must shard or replicate evenly over tp",
)
def _kv(c: Ctx) -> Iterator[Problem]:
    kv = int(c.info("kv_heads", 0) or 0)
    heads = int(c.info("attention_heads", 0) or 0)
    if kv and heads and heads % kv:
        yield c.p(
            "model_info.kv_heads",
            f"{heads} attention heads are not a multiple of {kv} KV heads",
            "copy num_attention_heads/num_key_value_heads from the model's config.json",
            "topology-kv-heads",
        )
    if kv and kv % c.tp and c.tp % kv:
        yield c.p(
            "topology.tp",
            f"tp={c.tp} neither divides nor is a multiple of the {kv} KV heads",
            "use a tp that divides the KV heads or is a multiple of them",
            "topology-kv-heads",
        )


@RULES.add(
    "extra-args-owned",
    "sparkrack (one registry)",
    "extra_args may not repeat a flag the registry or the renderer owns",
)
def _extra(c: Ctx) -> Iterator[Problem]:
    for word in c.data.get("extra_args") or []:
        owner = c.engine.owner_of(str(word))
        if owner is not None:
            flag = str(word).split("=", 1)[0]
            yield c.p(
                "extra_args",
                f"{flag} sets what {owner} owns",
                f"set {owner} instead of passing {flag}"
                if owner.count(".") == 1 and " " not in owner
                else "remove it",
                "extra-args-owned",
            )


def _extra_refusals(c: Ctx) -> Iterator[Problem]:
    """Every option of ``extra_args`` the engine does not allow (past the owned flags and the
    words the word rule refuses, which their own rules name), and every value of an allowed
    option that names a host or a path."""
    words = [str(w) for w in c.data.get("extra_args") or []]
    where = f"sparkrack/serving/engines/{c.engine.name}.py"
    for index, word in enumerate(words):
        if c.engine.owner_of(word) is not None or _word_problem(word) is not None:
            continue
        found = c.engine.extra_refusal(word) or c.engine.value_refusal(words, index)
        if found is None:
            continue
        rule, why = found
        allowed = ", ".join(sorted(c.engine.allowed_options)) or "none"
        yield c.p(
            "extra_args",
            f"{shown(word)} is refused: {why}",
            f"remove it; extra_args passes only the options {where} allows ({allowed}), with "
            "plain values",
            rule,
        )


def _extra_class(rule_id: str) -> Any:
    def check(c: Ctx) -> Iterator[Problem]:
        for problem in _extra_refusals(c):
            if problem.rule == rule_id:
                yield problem

    return check


for _klass, _rule_id in EXTRA_ARGS_CLASS_RULES.items():
    RULES.add(
        _rule_id,
        "sparkrack (extra_args is an allow-list per engine; the engine's source says what each "
        "refused option does)",
        f"extra_args may not pass a {_klass} option or value",
    )(_extra_class(_rule_id))
RULES.add(
    RULE_EXTRA_NOT_ALLOWED,
    "sparkrack (extra_args is an allow-list per engine)",
    "extra_args passes only the options the engine's class allows",
)(_extra_class(RULE_EXTRA_NOT_ALLOWED))


# What a word of extra_args may not hold: the words reach the server's argv one by one, through
# no shell and no template engine, so these would be passed literally (or, for a Jinja
# expression, expanded by Ansible on the way).
SHELL_OR_TEMPLATE = (
    ("`", "a backtick (shell command substitution)"),
    ("$(", "$( (shell command substitution)"),
    ("${", "${ (shell variable expansion)"),
    (";", "a ';' (a shell command separator)"),
    ("&&", "'&&' (a shell command separator)"),
    ("||", "'||' (a shell command separator)"),
    ("{{", "a Jinja expression"),
    ("{%", "a Jinja statement"),
    ("{#", "a Jinja comment"),
)
RULE_WORD = "extra-args-word"


def _word_problem(text: str) -> tuple[str, str] | None:
    """(message, fix) when a word of extra_args holds what only a shell or a template reads, or
    an option and more; None when it is one plain word."""
    option = text.split("=", 1)[0]
    if text.startswith("-") and any(ch.isspace() for ch in option):
        return (
            f"{shown(text)} is an option and more in one word: the engine's parser reads it "
            "as one unknown word, and no check can see which option it names",
            "split it into two words, or write --option=value",
        )
    for needle, what in SHELL_OR_TEMPLATE:
        if needle in text:
            return (
                f"{shown(text)} holds {what}: the word reaches the server's argv as it is, "
                "through no shell",
                "remove it; pass plain option and value words",
            )
    return None


@RULES.add(
    RULE_WORD,
    "sparkrack (extra_args become argv words one by one: no shell, no template engine)",
    "extra_args words hold one option or one value, nothing a shell or a template would read",
)
def _words(c: Ctx) -> Iterator[Problem]:
    for word in c.data.get("extra_args") or []:
        found = _word_problem(str(word))
        if found is not None:
            yield c.p("extra_args", found[0], found[1], RULE_WORD)


@RULES.add(
    "env-owned",
    "sparkrack (NCCL/secret env comes from the address plan and the Secret)",
    "env may not set variables sparkrack renders",
)
def _env(c: Ctx) -> Iterator[Problem]:
    registry_env = c.engine.owned_env()
    jit_env = c.engine.jit_env()
    for key in c.data.get("env") or {}:
        if key in jit_env:
            yield c.p(
                f"env.{key}",
                "points a JIT cache at the node's cache directory of this image (sparkrack "
                "renders it)",
                "remove it; set serving_jit_cache in the inventory to move the caches",
                "env-owned",
            )
        elif key in OWNED_ENV:
            yield c.p(
                f"env.{key}",
                "is rendered by sparkrack (address plan, transport, the HF token and key "
                "Secrets, the pod's address)",
                "remove it; set fabric/transport in the inventory or profile",
                "env-owned",
            )
        elif key in (bound := c.engine.bind_variables()):
            yield c.p(
                f"env.{key}",
                f"chooses the address the {bound[key]} binds: sparkrack renders the rank's own "
                "fabric address from the address plan, so that the ranks' connections stay on "
                "the fabric and off the cluster network",
                "remove it (the address plan owns every rank's fabric address)",
                "env-owned",
            )
        elif key in registry_env:
            yield c.p(
                f"env.{key}",
                f"is the profile key {registry_env[key]}",
                f"set {registry_env[key]} instead",
                "env-owned",
            )
        elif (reason := denied_env(str(key))) is not None:
            yield c.p(
                f"env.{key}",
                f"may not be set by a profile ({reason})",
                "remove it (profiles are shared; the inventory and Secrets own these)",
                "env-denied",
            )


@RULES.add(
    "patch-unknown",
    "sparkrack.patches.PATCH_IDS",
    "required patches must exist in the patch catalog",
)
def _patches(c: Ctx) -> Iterator[Problem]:
    wanted = [str(p) for p in c.data.get("patches") or []]
    if not wanted:
        return
    try:
        from sparkrack.patches import PATCH_IDS
    except ImportError:  # pragma: no cover - the patch engine ships with sparkrack
        yield c.p(
            "patches",
            "the patch engine (sparkrack.patches) is not installed",
            "reinstall sparkrack",
            "patch-unknown",
        )
        return
    for pid in wanted:
        if pid not in PATCH_IDS:
            yield c.p(
                "patches",
                f"{pid!r} is not a known patch",
                f"use one of: {', '.join(sorted(PATCH_IDS))}",
                "patch-unknown",
            )


MOVING_TAG_RULE = "image-moving-tag"


@RULES.add(
    MOVING_TAG_RULE,
    "src:super-guide runs vllm/vllm-openai:cu130-nightly; a moving tag changes what runs without the "
    "profile changing",
    "a moving image tag (latest, *nightly*) needs allow_moving_tag with the reason",
)
def _moving(c: Ctx) -> Iterator[Problem]:
    image = str(c.data.get("image", ""))
    if is_moving_tag(image) and not isinstance(c.data.get("allow_moving_tag"), dict):
        yield c.p(
            "image",
            f"{image} is a moving tag: what runs can change without this file changing",
            "pin a digest (image: repo:tag@sha256:<digest>) or a release tag, or accept it "
            "with allow_moving_tag: {reason: <why it cannot be pinned>}",
            MOVING_TAG_RULE,
        )


def _capacity(rule_id: str) -> Any:
    def check(c: Ctx) -> Iterator[Problem]:
        for problem in capacity_problems(c.data, c.nodes, c.source, engine=c.engine):
            if problem.rule == rule_id:
                yield problem

    return check


for _id, _summary in (
    (RULE_WEIGHTS, "the weights per GPU exceed a Spark's usable unified memory"),
    (RULE_POOL, "the memory fraction leaves nothing for the KV cache after the weights"),
    (RULE_CONTEXT, "vLLM/TRT-LLM: one full-length sequence does not fit the KV pool"),
    (RULE_STARTUP, "vLLM: the memory fraction of the total (OS included) exceeds what is free"),
):
    RULES.add(
        _id, "sparkrack.planner.memory (model_info weights + the engine's memory rule)", _summary
    )(_capacity(_id))


def check(
    data: dict[str, Any], source: str, nodes: int | None, engine: Engine | None = None
) -> list[Problem]:
    """Every problem of a schema-clean profile: the generic rules, then its engine's
    (``engine``: the caller resolved it already)."""
    eng = engine or engine_of(data)
    ctx = Ctx(data=data, source=source, nodes=nodes, engine=eng, image=eng.image_facts(data))
    problems: list[Problem] = []
    for r in RULES:
        problems.extend(r.check(ctx))
    problems.extend(eng.problems(ctx))
    return problems


def validate(
    data: Any, source: str, nodes: int | None = None, engine: Engine | None = None
) -> list[Problem]:
    """Every problem of a profile: schema first, then (on a schema-clean profile) every rule.

    ``nodes`` is the number of Sparks the profile runs on; ``None`` skips the tp·pp check.
    """
    problems = schema_problems(data, source)
    if problems:
        return problems
    return check(data, source, nodes, engine)


REVISION_RULE = "revision-unpinned"


def warnings(data: dict[str, Any], source: str) -> list[Problem]:
    """What validation reports without refusing: no pinned model revision, an accepted moving
    image tag, an ``allow_moving_tag`` that accepts nothing."""
    found: list[Problem] = []
    if data.get("revision") is None:
        found.append(
            Problem(
                source,
                "revision",
                f"not pinned: the fetch step downloads whatever {data.get('model')} main is "
                "at fetch time, and a switch back keeps that commit",
                "pin the commit you tested: revision: <40-hex commit of the model repo>",
                REVISION_RULE,
            )
        )
    image = str(data.get("image", ""))
    allowed = data.get("allow_moving_tag")
    if is_moving_tag(image) and isinstance(allowed, dict):
        found.append(
            Problem(
                source,
                "image",
                f"{image} is a moving tag, accepted by allow_moving_tag ({allowed.get('reason')})",
                "pin a digest (image: repo:tag@sha256:<digest>) once the image works",
                MOVING_TAG_RULE,
            )
        )
    elif allowed is not None and not is_moving_tag(image):
        found.append(
            Problem(
                source,
                "allow_moving_tag",
                f"{image} is not a moving tag: there is nothing to accept",
                "remove allow_moving_tag",
                MOVING_TAG_RULE,
            )
        )
    return found


def all_rules() -> list[Rule]:
    """The generic rules, then every engine's, each id once."""
    seen: dict[str, Rule] = {r.id: r for r in RULES}
    for eng in ENGINES.values():
        for r in eng.rule_list():
            seen.setdefault(r.id, r)
    return list(seen.values())


def rule_table() -> list[tuple[str, str, str]]:
    return [(r.id, r.seed, r.summary) for r in all_rules()]
