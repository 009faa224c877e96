"""The one interface every serving engine implements.

An :class:`Engine` owns everything sparkrack knows about one engine: its knob table (tuning keys
and the deployment flags, as rows of the same table), its ranks, argv, environment, config
files and probes, its validation rules (the seed traps), the memory semantics the planner needs,
and which upstream release its image corresponds to (the engine check). The manifests builder
(:mod:`sparkrack.serving.objects.ranks`) turns what an engine returns into Kubernetes objects, the
same way for every engine; nothing outside ``engines/`` asks which engine a profile uses.

:class:`SingleSparkEngine` is the shared shape of engines that run one process on one Spark
(vLLM, TensorRT-LLM): no NCCL group, no fabric VF, no privileged mode.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric.addressplan import NodePlan
from sparkrack.fabric.ncclenv import flight_recorder_env, rank_env
from sparkrack.inputs.imageref import without_digest
from sparkrack.planner.memory import MemoryModel, Serving
from sparkrack.serving import scripts
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines.extra_args import (
    EXTRA_ARGS_CLASS_RULES,
    NAME_HINTS,
    RULE_EXTRA_NOT_ALLOWED,
    ArgClass,
    value_class,
)
from sparkrack.serving.engines.facts import AcceptRatio, Metric, Quantity, Route
from sparkrack.serving.engines.listeners import (
    GATE_SOURCE,
    LOOPBACK_ADDRESS,
    Bind,
    Listener,
    Peer,
    PortOf,
    address_env,
    behind_gate,
    bind_variables,
)
from sparkrack.serving.engines.probes import group_guard_probes, http_probes
from sparkrack.serving.names import deployment_name
from sparkrack.serving.profile.images import ImageFacts, stated_facts
from sparkrack.serving.profile.knobs import Knob, PodVariable, RuntimeKnob, lookup
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.ruleset import Ctx, Rule, RuleSet
from sparkrack.serving.scripts.engine_gate import allowed as gate_passes


@dataclass(frozen=True)
class Rank:
    """One engine process: its rank number and the Spark it is pinned to."""

    rank: int
    node: NodePlan


@dataclass(frozen=True)
class FileSet:
    """Files an engine needs in its pod: one ConfigMap, mounted read-only at ``mount``."""

    volume: str
    """Volume name in the pod; also the ConfigMap name's suffix."""
    mount: str
    files: dict[str, str]
    mode: int | None = None


@dataclass(frozen=True)
class PodExtras:
    """Init containers and the volumes they share with the server container."""

    init_containers: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class JitCache:
    """One on-disk cache of kernels an engine compiles at start-up, kept on the node.

    The variable ``env`` points the cache at ``<contract.JIT_CACHE_MOUNT>/<name>``, a directory of
    the Spark's cache of the pod's image (a new image gets a new directory: no stale kernels).
    """

    name: str
    """Subdirectory under the pod's JIT-cache mount."""
    env: str
    """The variable the library reads its cache directory from."""
    default: str
    """Where the library writes without the variable (for the record)."""
    source: str
    """Where the variable and its default are defined."""

    @property
    def path(self) -> str:
        return f"{contract.JIT_CACHE_MOUNT}/{self.name}"


# The caches the engines' libraries keep; each engine module lists those its engine uses.
FLASHINFER_CACHE = JitCache(
    "flashinfer",
    "FLASHINFER_WORKSPACE_BASE",
    "$HOME (FlashInfer appends .cache/flashinfer/)",
    "flashinfer/jit/env.py",
)
TRITON_CACHE = JitCache(
    "triton", "TRITON_CACHE_DIR", "~/.triton/cache", "triton/runtime/cache.py (TRITON_HOME/.triton)"
)
INDUCTOR_CACHE = JitCache(
    "inductor",
    "TORCHINDUCTOR_CACHE_DIR",
    "<tempdir>/torchinductor_<user>",
    "torch/_inductor/runtime/cache_dir_utils.py (cache_dir, default_cache_dir)",
)
CUTE_DSL_CACHE = JitCache(
    "cute-dsl",
    "CUTE_DSL_CACHE_DIR",
    "<tempdir>/<user>/cutlass_python_cache",
    "nvidia-cutlass-dsl (CuTe DSL file cache)",
)
DEEPGEMM_CACHE = JitCache(
    "deep-gemm", "DG_JIT_CACHE_DIR", "$HOME/.deep_gemm", "deep_gemm/jit (DG_JIT_CACHE_DIR)"
)


def hf_token_env(ctx: ServingContext) -> dict[str, Any]:
    """The HF token as a Secret reference: its value never appears in a manifest."""
    return {
        "name": "HF_TOKEN",
        "valueFrom": {
            "secretKeyRef": {
                "name": ctx.hf_token_secret,
                "key": contract.HF_TOKEN_KEY,
                "optional": True,
            }
        },
    }


def fabric_env(
    profile: Profile,
    ctx: ServingContext,
    node: NodePlan,
    vf_index: int | None = None,
    image: ImageFacts | None = None,
) -> dict[str, str]:
    """The NCCL/Gloo environment of a rank in an NCCL group over the fabric: the one function
    that builds it (:func:`sparkrack.fabric.ncclenv.rank_env`), plus the pod's fabric interface
    name and PyTorch's flight recorder spelled for the image's PyTorch (``image``: its facts)."""
    return {
        "POD_FABRIC_IFNAME": contract.POD_FABRIC_IFNAME,
        **flight_recorder_env(
            image.torch if image else None,
            contract.flight_recorder_dir(deployment_name(ctx, profile)),
        ),
        **rank_env(
            ctx.plan,
            node,
            transport=profile.transport,
            gid_override=ctx.gid_index.get(node.name),
            vf_index=vf_index,
        ),
    }


def dashed(option: str) -> str:
    """``--a_b`` -> ``--a-b``: vLLM's parser and others accept both spellings."""
    return option[:2] + option[2:].replace("_", "-") if option.startswith("--") else option


def section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    block = data.get(name)
    return block if isinstance(block, Mapping) else {}


def number(value: Any) -> float | None:
    return None if value is None else float(value)


def integer(value: Any) -> int | None:
    return None if value is None else int(value)


class Engine:
    """Base of every engine module's class; see the module docstring."""

    name: str = ""
    entry: tuple[str, ...] = ()
    """The server's argv before the flags (``python3 -m sglang.launch_server``, ``vllm serve``)."""
    knobs: tuple[Knob, ...] = ()
    sections: tuple[str, ...] = ()
    """Profile blocks whose keys this engine owns (each key must be one of its knobs)."""
    rules: RuleSet = RuleSet()
    memory: MemoryModel
    uses_fabric: bool = False
    """True when the ranks form one NCCL group over the fabric (Multus VF, privileged pod)."""
    sparks: int | None = None
    """The Sparks a fabric engine's profile spans when no deployment lists them: ``None``, every
    Spark of the inventory; else the first that many (vLLM across Sparks: its tp x pp)."""
    gated: bool = False
    """The head's HTTP server listens on loopback behind sparkrack's gate
    (``serving/scripts/engine_gate.py``, a container of the head pod on the API port), which
    passes on the OpenAI API, health and metrics only: for an engine whose other routes
    (:attr:`routes`) hand a client what it must not have."""
    routes: tuple[Route, ...] = ()
    """The routes of the engine's releases past the OpenAI API, health and metrics, each with
    what a caller needs there: why the engine is :attr:`gated`. The gate passes none of them."""
    liveness_path: str = "/health"
    group_guard: bool = False
    """The worker ranks serve no HTTP: the group guard (``contract.GUARD_FILE``, which the engine
    ships in its launcher files) probes them against the head, so the group restarts together."""
    upstream: str | None = None
    """PyPI distribution whose parser and start-up checks validate the rendered argv."""
    metrics_path: str | None = "/metrics"
    """HTTP path of the engine's Prometheus endpoint on the API port (None: the engine version
    sparkrack runs has none that is verified)."""
    metrics_port: str = "http"
    """Named container port that serves ``metrics_path`` (the OpenAI-API port of rank 0)."""
    jit_caches: tuple[JitCache, ...] = ()
    """The kernel caches the engine's libraries write at start-up (kept per Spark and image)."""
    images: Mapping[str, ImageFacts] = MappingProxyType({})
    """Image reference (without digest) -> what sparkrack knows about it: the images the seeds
    ran with this engine."""
    metrics: tuple[Metric, ...] = ()
    """The engine's metrics that rules, dashboards and the bench read, as its wheels declare
    them."""
    recorded: Mapping[Quantity, str | AcceptRatio] = MappingProxyType({})
    """Quantity -> the metric of :attr:`metrics` that measures it here."""
    key_env: Mapping[str, str] = MappingProxyType({})
    """Variable of the container -> the key of the deployment's key Secret it is read from
    (``contract.ENGINE_KEY_KEY``, ``contract.ADMIN_KEY_KEY``): how the engine receives its keys.
    Empty: the engine's release takes no key, and only the NetworkPolicy fences its port."""
    client_key_env: str | None = None
    """The variable of :attr:`key_env` holding the key a client sends (``Authorization: Bearer``);
    None: the engine checks none."""
    reserved_flags: Mapping[str, str] = MappingProxyType({})
    """Options past the table that set what sparkrack owns (a key) -> who owns it; refused in
    ``extra_args`` like the table's own flags."""
    loading_barrier_s: float | None = None
    """Seconds the ranks wait for each other after loading their weights before the group dies
    (None: the engine has no such barrier)."""
    loading_barrier_env: str | None = None
    """The variable that sets :attr:`loading_barrier_s` in the engine's pinned releases (None: the
    releases hard-code it, and ``check`` warns for a load estimated near it)."""
    multi_rank_listeners: tuple[Listener, ...] = ()
    """Every socket a rank listens on when the deployment has several ranks
    (:mod:`.listeners`)."""
    single_rank_listeners: tuple[Listener, ...] = ()
    """Every socket the rank listens on when the deployment has one rank."""

    def listeners(self, ctx: ServingContext) -> tuple[Listener, ...]:
        """The declaration that applies to the deployment ``ctx`` serves."""
        many = len(self.ranks(ctx)) > 1
        return self.multi_rank_listeners if many else self.single_rank_listeners

    def bind_variables(self) -> dict[str, str]:
        """Every variable that chooses where one of the engine's listeners binds -> its name."""
        return bind_variables((*self.multi_rank_listeners, *self.single_rank_listeners))

    def bind_env(self, ctx: ServingContext, rank: Rank) -> dict[str, str]:
        """The variables that bind the rank's fabric listeners on its own fabric address."""
        return address_env(self.listeners(ctx), ctx.rank_address(rank.node))

    def scrape_annotations(self, ctx: ServingContext, rank: Rank) -> dict[str, str]:
        """``prometheus.io/*`` annotations of a rank's pod when it serves the engine's metrics
        (rank 0 of an engine with a Prometheus endpoint)."""
        if self.metrics_path is None or rank.rank != 0:
            return {}
        return {
            contract.PROMETHEUS_SCRAPE_ANNOTATION: "true",
            contract.PROMETHEUS_PATH_ANNOTATION: self.metrics_path,
            contract.PROMETHEUS_PORT_ANNOTATION: str(ctx.api_port),
        }

    def jit_env(self) -> dict[str, str]:
        """The variables that point every JIT cache of the engine at the node's directory."""
        return {cache.env: cache.path for cache in self.jit_caches}

    # --- the table ----------------------------------------------------------------------------

    def knob(self, key: str) -> Knob | None:
        return next((k for k in self.knobs if k.key == key), None)

    def section_knobs(self, name: str) -> list[Knob]:
        return [k for k in self.knobs if k.section == name and k.from_profile]

    def owned_flags(self) -> dict[str, str]:
        """Every flag the table renders, and its aliases -> the profile key that sets it (or who
        sets it)."""
        out: dict[str, str] = dict(self.reserved_flags)
        for k in self.knobs:
            owner = k.key if k.from_profile else "sparkrack (inventory and address plan)"
            for flag in (k.flag, *k.aliases) if k.flag else ():
                out[flag] = owner
        return out

    allowed_options: Mapping[str, bool] = MappingProxyType({})
    """Options a profile's ``extra_args`` may pass -> whether the option takes a value; each
    read in the engine's source. Every other option is refused (:meth:`extra_refusal`)."""
    refused_options: Mapping[str, tuple[ArgClass, str]] = MappingProxyType({})
    """Options of the engine's release that load code, connect out, use paths or log requests ->
    (class, what the release does with it): the refusal names the class's rule."""

    def extra_refusal(self, word: str) -> tuple[str, str] | None:
        """(rule id, why) when the option ``word`` of ``extra_args`` is not one the engine
        allows; None when it is allowed, or not an option."""
        option, _, value = word.partition("=")
        if not option.startswith("-"):
            return None
        spelled = dashed(option)
        allowed = {dashed(o) for o in self.allowed_options}
        if spelled in allowed:
            found = value_class(value) if value else None
            return (EXTRA_ARGS_CLASS_RULES[found[0]], found[1]) if found else None
        refused = {dashed(o): row for o, row in self.refused_options.items()}
        row = refused.get(spelled)
        if row is None and len(spelled) > 3:
            prefixed = {r for o, r in refused.items() if o.startswith(spelled)}
            row = prefixed.pop() if len(prefixed) == 1 else None
        if row is not None:
            return EXTRA_ARGS_CLASS_RULES[row[0]], row[1]
        for klass, hints in NAME_HINTS:
            if any(h in spelled for h in hints):
                return EXTRA_ARGS_CLASS_RULES[klass], f"its name says it is a {klass} option"
        return RULE_EXTRA_NOT_ALLOWED, "it is not an option sparkrack has read and allows"

    def value_refusal(self, words: Sequence[str], index: int) -> tuple[str, str] | None:
        """(rule id, why) when the word at ``index`` is the value of an allowed option and names
        a host or a path; None otherwise."""
        if index == 0 or words[index].startswith("-"):
            return None
        before = dashed(words[index - 1].partition("=")[0])
        takes = {dashed(o): v for o, v in self.allowed_options.items()}
        if "=" in words[index - 1] or not takes.get(before):
            return None
        found = value_class(words[index])
        return (EXTRA_ARGS_CLASS_RULES[found[0]], found[1]) if found else None

    config_options: tuple[str, ...] = ("--config",)
    """Options that load settings from a file, past the table (refused in ``extra_args``)."""

    def is_config_option(self, word: str) -> bool:
        """``word`` names a config-file option, exactly or as an argparse abbreviation."""
        spelled = dashed(word.split("=", 1)[0])
        return any(
            spelled == config or (len(spelled) > 3 and config.startswith(spelled))
            for config in self.config_options
        )

    def owner_of(self, word: str) -> str | None:
        """Who owns the option ``word`` of ``extra_args`` would set, as argparse would resolve it
        without knowing the engine's other options: an exact flag or alias, its ``_`` spelling,
        or an unambiguous prefix of one (argparse accepts abbreviations). None: not owned."""
        option = word.split("=", 1)[0]
        if not option.startswith("-"):
            return None
        spelled = dashed(option)
        owned = {dashed(flag): owner for flag, owner in self.owned_flags().items()}
        if self.is_config_option(option):
            return "a config file (it would override what sparkrack renders)"
        if spelled in owned:
            return owned[spelled]
        if spelled.startswith("--") and len(spelled) > 3:
            matches = sorted({owner for flag, owner in owned.items() if flag.startswith(spelled)})
            if matches:
                return " or ".join(matches)
        return None

    def served_name(self, data: Mapping[str, Any]) -> str:
        """The model name the server answers to: the profile's ``<engine>.served_model_name``
        when the engine's table has that key and the profile sets it, else the model id."""
        key = f"{self.name}.served_model_name"
        name = lookup(data, key) if self.knob(key) is not None else None
        return str(name) if name else str(data.get("model", ""))

    def owned_env(self) -> dict[str, str]:
        """Every environment variable the table renders -> the profile key that sets it."""
        return {k.env: k.key for k in self.knobs if k.env}

    # --- ranks --------------------------------------------------------------------------------

    def for_profile(self, data: Mapping[str, Any]) -> Engine:
        """The engine that serves a profile of this engine's name: itself, or the variant its
        topology needs (vLLM across Sparks)."""
        return self

    def ranks(self, ctx: ServingContext) -> list[Rank]:
        raise NotImplementedError

    def rank(self, ctx: ServingContext, rank: int) -> Rank:
        for r in self.ranks(ctx):
            if r.rank == rank:
                return r
        count = len(self.ranks(ctx))
        raise SparkrackError(
            Problem(
                "--rank",
                str(rank),
                f"no such rank ({self.name} runs ranks 0..{count - 1} here)",
                "pick a rank the serving plan shows",
                "rank",
            )
        )

    # --- command and environment ----------------------------------------------------------------

    def runtime_value(self, knob: RuntimeKnob, ctx: ServingContext, rank: Rank) -> str | None:
        """The value of a deployment flag of the table for one rank (None: the rank's argv
        leaves the flag out)."""
        if knob.runtime == "host":
            # A gated engine: loopback, behind its gate. Else the pod's cluster address only:
            # never 0.0.0.0, never the fabric VF.
            return LOOPBACK_ADDRESS if self.gated else PodVariable.of(contract.POD_IP_ENV)
        if knob.runtime == "api_key":
            return PodVariable.of(contract.ENGINE_KEY_ENV)
        if knob.runtime == "admin_api_key":
            return PodVariable.of(contract.ADMIN_KEY_ENV)
        if knob.runtime == "port":
            return str(ctx.api_port)
        raise ValueError(f"{self.name}: no value for the deployment flag {knob.flag}")

    def rank_facts(self, ctx: ServingContext, rank: Rank) -> dict[str, str]:
        """What the engine's release must build from the rank's command (the engine check's
        facts: field -> value), as the plan of the deployment's ranks says; empty: nothing."""
        return {}

    def runtime_switch(self, knob: RuntimeKnob, rank: Rank) -> bool:
        """Whether a rank's argv carries the deployment switch ``knob`` (a flag without value)."""
        return True

    def flags(self, profile: Profile, ctx: ServingContext, rank: Rank) -> list[str]:
        """The table's words in table order (tuning keys and deployment flags)."""
        words: list[str] = []
        for knob in self.knobs:
            if isinstance(knob, RuntimeKnob) and knob.kind == "bool":
                if self.runtime_switch(knob, rank):
                    words.append(str(knob.flag))
            elif isinstance(knob, RuntimeKnob):
                value = self.runtime_value(knob, ctx, rank)
                if value is not None:
                    words += [str(knob.flag), value]
            else:
                words += knob.args(lookup(profile.data, knob.key))
        return words

    def argv(self, profile: Profile, ctx: ServingContext, rank: Rank) -> list[str]:
        """The server's full argv: entry point, the table, then the profile's ``extra_args``."""
        extra = [str(w) for w in profile.data.get("extra_args") or []]
        return [*self.entry, *self.flags(profile, ctx, rank), *extra]

    def env(self, profile: Profile, ctx: ServingContext, rank: Rank) -> dict[str, str]:
        """The literal environment of a rank (secrets come from Secret references, not here)."""
        env: dict[str, str] = {}
        for knob in self.knobs:
            pair = knob.env_pair(lookup(profile.data, knob.key))
            if pair:
                env[pair[0]] = pair[1]
        env["HF_HOME"] = contract.HF_CACHE_MOUNT
        # The fetch step put the weights in the node's cache before the server starts.
        env["HF_HUB_OFFLINE"] = "1"
        env.update(self.jit_env())
        env.update({str(k): str(v) for k, v in (profile.data.get("env") or {}).items()})
        if self.uses_fabric:
            # The rank's NCCL env over its VF, then where its listeners bind: the profile's own
            # env may not move a rank off the fabric.
            env.update(
                fabric_env(profile, ctx, rank.node, ctx.vf_index, self.image_facts(profile.data))
            )
            env.update(self.bind_env(ctx, rank))
        return env

    key_flags: Mapping[str, str] = MappingProxyType({})
    """Variable of :attr:`key_env` -> the option the engine reads that key from, for an engine
    that takes its keys from argv only; the launcher hands them over in the engine's
    interpreter, never in an argv (empty: the engine reads its variables itself)."""

    def rank_key_env(self, rank: int) -> dict[str, str]:
        """The part of :attr:`key_env` rank ``rank`` holds."""
        return dict(self.key_env)

    def container_command(
        self, profile: Profile, argv: list[str], rank: Rank
    ) -> tuple[list[str], list[str]]:
        """(container ``command``, ``args``) for an argv: the entry point is the command."""
        return argv[: len(self.entry)], argv[len(self.entry) :]

    # --- the pod --------------------------------------------------------------------------------

    def config(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The engine config file's mapping rendered from the profile (empty: none)."""
        return {}

    def files(self, profile: Profile) -> list[FileSet]:
        return []

    def extras(self, profile: Profile, ctx: ServingContext) -> PodExtras:
        return PodExtras()

    def probes(self, profile: Profile, ctx: ServingContext, rank: Rank) -> dict[str, Any]:
        """HTTP probes on the head; a worker rank of a :attr:`group_guard` engine serves no HTTP
        and is probed by the group guard against its head."""
        if self.group_guard and rank.rank > 0:
            return group_guard_probes(ctx, deployment_name(ctx, profile), self.client_key_env)
        return http_probes(ctx, self.liveness_path, self.api_port_ref(ctx))

    def api_port_ref(self, ctx: ServingContext) -> str | int:
        """The port the kubelet's probes name: a gated engine's is the API port by number (its
        gate's container, not the engine's, declares the named port ``http``)."""
        return ctx.api_port if self.gated else "http"

    def gate_also(self) -> tuple[str, ...]:
        """Exact paths the gate passes on past its own list: the engine's Prometheus path."""
        path = self.metrics_path
        return (path,) if self.gated and path and not gate_passes(path) else ()

    def gate_files(self) -> dict[str, str]:
        """The gate's file, for the launcher ConfigMap of a gated engine."""
        return {contract.GATE_FILE: scripts.text(contract.GATE_FILE)} if self.gated else {}

    def headless_port(self, ctx: ServingContext) -> tuple[str, int]:
        """The named port the headless Service publishes: the rendezvous port of an engine
        across Sparks, the API port otherwise."""
        return ("dist", ctx.dist_port) if self.uses_fabric else ("http", ctx.api_port)

    # --- validation ---------------------------------------------------------------------------

    def problems(self, c: Ctx) -> Iterator[Problem]:
        for rule in self.rules:
            yield from rule.check(c)

    def rule_list(self) -> list[Rule]:
        return list(self.rules)

    # --- planner and engine check -------------------------------------------------------------

    def serving(self, data: Mapping[str, Any]) -> Serving:
        """The planner's view of a profile's topology and engine block."""
        raise NotImplementedError

    def upstream_version(self, profile: Profile) -> str | None:
        """The upstream release the engine check runs for this profile's image."""
        facts = self.image_facts(profile.data)
        return None if facts is None else facts.version

    def table_problems(self, argv: Sequence[str], profile: Profile) -> list[str]:
        """Problems of a rank's argv (words after the entry point) and the engine's config file
        against a table taken from the engine's source: the engine check of an engine whose
        release is not on PyPI (:attr:`upstream` None). Empty: none found."""
        raise NotImplementedError(f"{self.name} is checked by its PyPI wheel ({self.upstream})")

    # --- images ---------------------------------------------------------------------------------

    def image_facts(self, data: Mapping[str, Any]) -> ImageFacts | None:
        """Facts about a profile's image: what it states in ``image_info``, else this engine's
        table of the images the seeds ran (a digest keeps its tag's facts)."""
        stated = stated_facts(data, self.name)
        return stated or self.images.get(without_digest(str(data.get("image", ""))))

    # --- metrics --------------------------------------------------------------------------------

    def metric(self, quantity: Quantity) -> Metric | None:
        """The engine's metric of ``quantity``, if one metric measures it."""
        name = self.recorded.get(quantity)
        return next((m for m in self.metrics if m.name == name), None)

    def log_accept_length(self, line: str) -> float | None:
        """The speculative-decoding acceptance length one line of the server's log reports
        (None: the line reports none, or the engine logs none sparkrack reads)."""
        return None


def api_listeners(
    source: str, metrics_path: str | None, gated: bool = False
) -> tuple[Listener, ...]:
    """The OpenAI API on the pod's cluster address, and the Prometheus endpoint on its port;
    ``gated``: both opened by the gate, and the engine's own server (``source``) on loopback."""
    if gated:
        return (*api_listeners(GATE_SOURCE, metrics_path), behind_gate(source))
    clients = (Peer.GATEWAY, Peer.MONITORING, Peer.RANKS, Peer.WATCHDOG, Peer.KUBELET)
    api = Listener("api", "head", Bind.CLUSTER, PortOf.API, clients, source)
    if metrics_path is None:
        return (api,)
    metrics = Listener(
        f"metrics ({metrics_path})", "head", Bind.CLUSTER, PortOf.API, (Peer.MONITORING,), source
    )
    return api, metrics


class SingleSparkEngine(Engine):
    """One process on one Spark: ``serving_spark`` (else the rank-0 Spark of the plan)."""

    config_file: str | None = None
    """Name of the engine config file rendered from the profile, if the engine has one."""

    def ranks(self, ctx: ServingContext) -> list[Rank]:
        return [Rank(0, ctx.spark_node())]

    def runtime_value(self, knob: RuntimeKnob, ctx: ServingContext, rank: Rank) -> str | None:
        if knob.runtime == "config" and self.config_file:
            return f"{contract.ENGINE_CONFIG_MOUNT}/{self.config_file}"
        return super().runtime_value(knob, ctx, rank)

    def files(self, profile: Profile) -> list[FileSet]:
        """The engine's config file, if it has one, and the gate's launcher ConfigMap."""
        out = []
        gate = self.gate_files()
        if gate:
            out.append(FileSet("launcher", contract.LAUNCHER_MOUNT, gate, 0o555))
        body = self.config(profile.data)
        if not body or not self.config_file:
            return out
        import yaml

        text = yaml.safe_dump(body, sort_keys=False)
        return [*out, FileSet("config", contract.ENGINE_CONFIG_MOUNT, {self.config_file: text})]

    def single_topology(self, c: Ctx) -> Iterator[Problem]:
        """tp = pp = ep = 1: one GB10 per Spark (src:super-guide)."""
        for key, value in (("tp", c.tp), ("pp", c.pp), ("ep", c.ep)):
            if value != 1:
                yield c.p(
                    f"topology.{key}",
                    f"{key}={value}, but {self.name} runs on a single Spark (one GPU)",
                    f"set topology.{key}: 1 (multi-Spark serving is engine: sglang)",
                    "single-node-topology",
                )

    def problems(self, c: Ctx) -> Iterator[Problem]:
        yield from self.single_topology(c)
        yield from super().problems(c)

    def rule_list(self) -> list[Rule]:
        single = Rule(
            "single-node-topology",
            "src:super-guide (one GB10 per Spark: tensor-parallel-size 1, expert parallelism not "
            "applicable)",
            "vLLM/TensorRT-LLM profiles run on one Spark: tp = pp = ep = 1",
            self.single_topology,
        )
        return [single, *super().rule_list()]


def long_context_problems(
    c: Ctx, engine_name: str, length_key: str, env_name: str, rule_id: str
) -> Iterator[Problem]:
    """A context length beyond the model config's ``max_position_embeddings`` without the engine's
    allow-long environment knob (``<engine>.allow_long_max_model_len``) — both engines refuse it."""
    block = c.block(engine_name)
    length, cap = block.get(length_key), c.info("max_position_embeddings")
    if (
        isinstance(length, int)
        and isinstance(cap, int)
        and length > cap
        and block.get("allow_long_max_model_len") is not True
    ):
        yield c.p(
            f"{engine_name}.{length_key}",
            f"{length} exceeds the model config's max_position_embeddings {cap}; "
            f"{engine_name} refuses it",
            f"set {engine_name}.allow_long_max_model_len: true ({env_name}=1)",
            rule_id,
        )
