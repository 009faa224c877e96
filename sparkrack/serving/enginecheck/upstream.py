"""Check rendered engine commands with the engine's own upstream code, off the GPU and offline.

SGLang and vLLM: the release wheel from PyPI is installed once into an isolated environment
under the cache directory (``SPARKRACK_CACHE_DIR``, default ``$XDG_CACHE_HOME/sparkrack`` or
``~/.cache/sparkrack``), pinned by ``sparkrack/data/enginecheck/envs.json``. A harness script
(``sparkrack/data/enginecheck/harness.py``) runs in that environment: the engine's own parser
parses each argv, and its own post-init handling and start-up checks run on the result, with a
GB10 and the model's config standing in for the GPU and the Hub.

An engine without a release wheel of its image's version on PyPI checks itself against a table
taken from its source (``Engine.table_problems``; TensorRT-LLM's is
``sparkrack/data/enginecheck/trtllm-*.json``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sparkrack.errors import Problem, SparkrackError, printable

DATA = resources.files("sparkrack") / "data" / "enginecheck"
# A cold environment build (downloads included) stays well below this.
PIP_TIMEOUT_S = 900
CHECK_TIMEOUT_S = 600


@dataclass(frozen=True)
class Invocation:
    """One rank's launch as the engine sees it."""

    label: str  # e.g. "glm-4.7-nvfp4 rank 1"
    argv: tuple[str, ...]  # words after the entry point: what the engine's own parser sees
    env: dict[str, str]  # the rank's literal environment
    model: str  # Hugging Face id, e.g. nvidia/GLM-4.7-NVFP4
    model_info: dict[str, Any]  # the profile's model_info block


@dataclass(frozen=True)
class Verdict:
    label: str
    ok: bool
    error: str  # the upstream exception as "Type: message" ("" when ok)
    unknown_env: tuple[str, ...]  # engine-prefixed env names this version does not define
    facts: tuple[tuple[str, str], ...] = ()  # what the engine built from the argv (vLLM: its
    # ParallelConfig's sizes, ranks and addresses), when it accepted it


def cache_dir() -> Path:
    """``SPARKRACK_CACHE_DIR``, else ``$XDG_CACHE_HOME/sparkrack``, else ``~/.cache/sparkrack``."""
    explicit = os.environ.get("SPARKRACK_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sparkrack"


@cache
def recipes() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / "envs.json").read_text(encoding="utf-8"))
    return loaded


def supported_versions(dist: str) -> tuple[str, ...]:
    engines: dict[str, Any] = recipes()["engines"]
    if dist not in engines:
        return ()
    return tuple(engines[dist]["versions"])


def _recipe(dist: str, version: str) -> dict[str, Any]:
    engines: dict[str, Any] = recipes()["engines"]
    if version not in supported_versions(dist):
        known = ", ".join(f"{d} {v}" for d in engines for v in engines[d]["versions"])
        raise SparkrackError(
            Problem(
                "sparkrack/data/enginecheck/envs.json",
                f"engines.{dist}.versions",
                f"no engine-check environment for {dist} {version} (known: {known})",
                fix=f"add {dist} {version} with its pinned dependencies to envs.json",
            )
        )
    entry: dict[str, Any] = engines[dist]
    return entry


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _pip(args: Sequence[str], what: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise SparkrackError(
            Problem(
                "engine check",
                what,
                f"pip failed: {proc.stderr.strip()[-1500:]}",
                fix="check the network to PyPI once; later runs use the cache offline",
            )
        )


def download(pins: Sequence[str], wheels: Path, what: str, sources: Sequence[str] = ()) -> None:
    """``pip download --no-deps --only-binary=:all:`` of ``pins`` into ``wheels``, with progress
    on stderr: what is downloaded and where, each file as pip starts it (name and size), a line
    every :data:`PROGRESS_EVERY_S` seconds while it runs, and the total when done. ``sources``
    replaces PyPI (``--no-index --find-links DIR``)."""
    before = _size(wheels)
    cmd = [
        sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps",
        "--only-binary=:all:", "--progress-bar", "off", *sources, "-d", str(wheels), *pins,
    ]  # fmt: skip
    say = _progress_line
    say(f"downloading {', '.join(pins)} into {wheels} (once: later runs use the cache)")
    start = time.monotonic()
    tail: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        stop = threading.Event()

        def heartbeat() -> None:
            while not stop.wait(PROGRESS_EVERY_S):
                say(f"still downloading after {time.monotonic() - start:.0f} s")

        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail = [*tail[-40:], line.rstrip()]
                if line.lstrip().startswith(("Downloading", "Saved", "File was already")):
                    say(printable(line.strip()))
            code = proc.wait(timeout=PIP_TIMEOUT_S)
        finally:
            stop.set()
            beat.join()
    if code != 0:
        raise SparkrackError(
            Problem(
                "engine check",
                what,
                f"pip failed: {chr(10).join(tail)[-1500:]}",
                fix="check the network to PyPI once; later runs use the cache offline",
            )
        )
    got = (_size(wheels) - before) / 1e6
    say(f"downloaded {got:.1f} MB in {time.monotonic() - start:.0f} s")


PROGRESS_EVERY_S = 15.0


def _progress_line(text: str) -> None:
    print(f"engine check: {text}", file=sys.stderr, flush=True)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file()) if folder.is_dir() else 0


def _missing_offline(path: Path, what: str) -> SparkrackError:
    return SparkrackError(
        Problem(
            str(path),
            what,
            "not in the engine-check cache and offline was requested",
            fix="run `sparkrack validate --engine-check` once with PyPI reachable "
            "(or set SPARKRACK_CACHE_DIR to a cache that holds it)",
        )
    )


def _install(target: Path, pins: Sequence[str], *, offline: bool) -> None:
    """``pip install --no-deps --target`` of exactly ``pins``, wheels kept in ``<cache>/wheels``.

    Built in a sibling directory and renamed into place, so a half-built environment is
    never used.
    """
    stamp = "\n".join(sorted(pins))
    done = target / ".complete"
    if done.is_file() and done.read_text(encoding="utf-8") == stamp:
        return
    if offline:
        raise _missing_offline(target, "environment")
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    # --no-compile: the harness imports a small part of torch and the engine, and Python writes
    # the bytecode of what it imports on first import; compiling every module costs a third of
    # the build (docs/dev/measurements/cold-installs.json).
    common = ["--no-deps", "--only-binary=:all:", "--no-compile", "--quiet"]
    download(pins, wheels, f"download {target.name}")
    building = target.with_name(target.name + ".building")
    if building.exists():
        _rmtree(building)
    _pip(
        ["install", *common, "--no-index", "--find-links", str(wheels), "--target", str(building)]
        + list(pins),
        f"install {target.name}",
    )
    (building / ".complete").write_text(stamp, encoding="utf-8")
    if target.exists():
        _rmtree(target)
    building.rename(target)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


def _engine_wheel(dist: str, version: str, *, offline: bool) -> Path:
    wheels = cache_dir() / "wheels"
    found = sorted(wheels.glob(f"{_norm(dist)}-{version}-*.whl"))
    if not found:
        if offline:
            raise _missing_offline(wheels, f"{dist}=={version} wheel")
        wheels.mkdir(parents=True, exist_ok=True)
        download([f"{dist}=={version}"], wheels, f"download {dist}=={version}")
        found = sorted(wheels.glob(f"{_norm(dist)}-{version}-*.whl"))
    return found[0]


def _extension_modules(names: Sequence[str]) -> list[str]:
    """Module names of the compiled extensions among a wheel's members."""
    modules = []
    for name in names:
        match = re.fullmatch(r"(.+?)(?:\.[\w.-]+)?\.so", name)
        if match and "/" in name and not name.startswith(".."):
            modules.append(match.group(1).split(".")[0].replace("/", "."))
    return sorted(set(modules))


def ensure_env(dist: str, version: str, *, offline: bool = False) -> Path:
    """The cached isolated environment of ``dist==version``; built (downloads once) if needed."""
    recipe = _recipe(dist, version)
    root = cache_dir() / "enginecheck"
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time (parallel test workers)
        return _ensure_env(root, dist, version, recipe, offline=offline)


def _ensure_env(
    root: Path, dist: str, version: str, recipe: dict[str, Any], *, offline: bool
) -> Path:
    _install(root / "base", recipes()["base"], offline=offline)
    env = root / f"{dist}-{version}"
    deps = _merge_pins(recipe["common"], recipe["versions"][version])
    _install(deps_dir(dist, version), deps, offline=offline)
    engine = env / "engine"
    if not (engine / ".complete").is_file():
        wheel = _engine_wheel(dist, version, offline=offline)
        building = env / "engine.building"
        if building.exists():
            _rmtree(building)
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            binary = _binary_members(names)
            zf.extractall(building, [n for n in names if n not in binary])
        (building / "extensions.json").write_text(
            json.dumps(_extension_modules(binary)), encoding="utf-8"
        )
        (building / ".complete").write_text(wheel.name, encoding="utf-8")
        if engine.exists():
            _rmtree(engine)
        building.rename(engine)
    return env


def deps_dir(dist: str, version: str) -> Path:
    """The dependency directory of ``dist==version``: shared by versions with the same pins."""
    recipe = _recipe(dist, version)
    deps = _merge_pins(recipe["common"], recipe["versions"][version])
    digest = hashlib.sha256("\n".join(deps).encode()).hexdigest()[:12]
    return cache_dir() / "enginecheck" / f"deps-{digest}"


def _merge_pins(common: Sequence[str], specific: Sequence[str]) -> list[str]:
    """``common`` pins with those that ``specific`` pins again replaced by ``specific``'s."""
    pins = {_norm(p.split("==")[0]): p for p in common}
    pins.update({_norm(p.split("==")[0]): p for p in specific})
    return sorted(pins.values())


def _binary_members(names: Sequence[str]) -> list[str]:
    return [n for n in names if n.endswith(".so") or ".so." in n]


def _harness(dist: str, version: str, request: dict[str, Any], *, offline: bool) -> dict[str, Any]:
    env = ensure_env(dist, version, offline=offline)
    base = cache_dir() / "enginecheck" / "base"
    extensions = json.loads((env / "engine" / "extensions.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="sparkrack-enginecheck-") as tmp:
        answer_path = Path(tmp) / "answer.json"
        request = {
            **request,
            "dist": dist,
            "standins": [*recipes()["engines"][dist]["standins"], *extensions],
            "torch_preimport": recipes()["engines"][dist].get("torch_preimport", []),
            "answer": str(answer_path),
        }
        paths = [str(env / "engine"), str(deps_dir(dist, version)), str(base)]
        script = str(DATA / "harness.py")
        bootstrap = (
            f"import sys; sys.path[:0] = {paths!r}; sys.argv = [{script!r}]; "
            f"exec(compile(open({script!r}).read(), {script!r}, 'exec'), "
            "{'__name__': '__main__', '__file__': " + repr(script) + "})"
        )
        clean_env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VLLM_", "SGL"))
        }
        proc = subprocess.run(
            [sys.executable, "-I", "-c", bootstrap],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            env={**clean_env, "HOME": tmp},
            cwd=tmp,
            check=False,
        )
        if proc.returncode != 0 or not answer_path.is_file():
            raise SparkrackError(
                Problem(
                    "engine check",
                    f"{dist} {version}",
                    f"harness failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}",
                    fix="report this: the engine's import chain needs another stand-in",
                )
            )
        answer: dict[str, Any] = json.loads(answer_path.read_text(encoding="utf-8"))
    if "fatal" in answer:
        raise SparkrackError(
            Problem(
                "engine check",
                f"{dist} {version}",
                f"the engine does not import: {answer['fatal']}",
                fix="add the missing module to standins or deps in envs.json",
            )
        )
    return answer


@dataclass(frozen=True)
class Answer:
    """What one harness process of an engine version answers."""

    verdicts: list[Verdict]  # one per invocation, in order
    dests: list[tuple[str, str | None]]  # each option word with its dest (None: unknown)
    known_env: frozenset[str]  # environment variables the version defines


def ask(
    dist: str,
    version: str,
    invocations: Sequence[Invocation] = (),
    words: Sequence[str] = (),
    *,
    offline: bool = False,
) -> Answer:
    """One process of ``dist==version``: each invocation through its own parser and start-up
    checks, each option word of ``words`` resolved by its parser, and the env names it defines.

    Values among ``words`` (words not starting with ``-``) are skipped; ``--x=y`` resolves by its
    option part.
    """
    models: dict[str, dict[str, Any]] = {}
    for inv in invocations:
        files = hub_files(inv.model_info)
        if models.setdefault(inv.model, files) != files:
            raise SparkrackError(
                Problem(
                    inv.label,
                    "model_info",
                    f"two invocations give {inv.model} different model_info",
                    fix="check one model per batch or give it one model_info",
                )
            )
    jobs = [{"label": i.label, "argv": list(i.argv), "env": i.env} for i in invocations]
    options = [w for w in words if w.startswith("-") and not _is_number(w)]
    request: dict[str, Any] = {"jobs": jobs, "models": models}
    if options:  # the harness builds the parser for words only when there are some
        request["words"] = options
    answer = _harness(dist, version, request, offline=offline)
    known = frozenset(answer["known_env"])
    prefixes = tuple(answer["env_prefixes"])
    verdicts = []
    for inv, got in zip(invocations, answer["verdicts"], strict=True):
        unknown = tuple(sorted(k for k in inv.env if k.startswith(prefixes) and k not in known))
        facts = tuple(sorted((str(k), str(v)) for k, v in (got.get("facts") or {}).items()))
        verdicts.append(Verdict(got["label"], bool(got["ok"]), str(got["error"]), unknown, facts))
    return Answer(verdicts, list(zip(options, answer.get("dests", []), strict=True)), known)


def run_upstream(
    dist: str, version: str, invocations: Sequence[Invocation], *, offline: bool = False
) -> list[Verdict]:
    """Each invocation through ``dist==version``'s own parser and start-up checks (one process)."""
    return ask(dist, version, invocations, offline=offline).verdicts


def option_dests(
    dist: str, version: str, words: Sequence[str], *, offline: bool = False
) -> list[tuple[str, str | None]]:
    """Each option word of ``words`` with the dest the real parser resolves it to (None: unknown).

    Values (words not starting with ``-``) are skipped; ``--x=y`` resolves by its option part.
    """
    return ask(dist, version, words=words, offline=offline).dests


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


# --- model config stand-in ------------------------------------------------------------------

# Hugging Face model_type of each architecture the profiles use; a nested (multimodal) config
# carries the language model's keys under text_config.
MODEL_TYPES: dict[str, tuple[str, str | None]] = {
    "Glm4MoeForCausalLM": ("glm4_moe", None),
    "NemotronHForCausalLM": ("nemotron_h", None),
    "Qwen3_5MoeForConditionalGeneration": ("qwen3_5_moe", "qwen3_5_moe_text"),
    "Gemma4ForConditionalGeneration": ("gemma4", "gemma4_text"),
}
NVFP4_QUANT = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}


def _hybrid_pattern(layers: Mapping[str, Any]) -> str:
    """Nemotron-H layer pattern (M mamba, E MoE, * attention) with the profile's counts."""
    mamba, moe, attention = (int(layers.get(k, 0)) for k in ("mamba", "moe", "attention"))
    body = "ME" * min(mamba, moe) + "M" * (mamba - moe) + "E" * (moe - mamba)
    if attention <= 0:
        return body
    step = max(1, len(body) // attention)
    out = ""
    for i, ch in enumerate(body):
        out += ch
        if (i + 1) % step == 0 and out.count("*") < attention:
            out += "*"
    return out + "*" * (attention - out.count("*"))


def hf_config(model_info: Mapping[str, Any]) -> dict[str, Any]:
    """A config.json for the model built from the profile's ``model_info``."""
    arch = str(model_info.get("architecture", ""))
    if arch not in MODEL_TYPES:
        raise SparkrackError(
            Problem(
                "model_info",
                "architecture",
                f"no model config stand-in for {arch or '(none)'}",
                fix=f"use one of {', '.join(MODEL_TYPES)} or add it to enginecheck.MODEL_TYPES",
            )
        )
    model_type, text_type = MODEL_TYPES[arch]
    layers = model_info.get("layers", {})
    text: dict[str, Any] = {
        "num_attention_heads": model_info.get("attention_heads"),
        "num_key_value_heads": model_info.get("kv_heads"),
        "head_dim": model_info.get("head_dim"),
        "hidden_size": model_info.get("hidden_size"),
        "vocab_size": model_info.get("vocab_size"),
        "max_position_embeddings": model_info.get("max_position_embeddings"),
        "num_hidden_layers": layers.get("total"),
    }
    experts = model_info.get("experts")
    if experts:
        text.update(
            n_routed_experts=experts.get("routed"),
            num_experts=experts.get("routed"),
            n_shared_experts=experts.get("shared"),
            num_experts_per_tok=experts.get("per_token"),
            moe_latent_size=experts.get("latent_size"),
        )
    if "dense" in layers:
        text["first_k_dense_replace"] = layers["dense"]
    mamba = model_info.get("mamba")
    if mamba:
        text.update(
            mamba_num_heads=mamba.get("num_heads"),
            mamba_head_dim=mamba.get("head_dim"),
            ssm_state_size=mamba.get("state_size"),
            conv_kernel=mamba.get("conv_kernel"),
            n_groups=mamba.get("n_groups"),
        )
    if model_type == "nemotron_h":
        text["hybrid_override_pattern"] = _hybrid_pattern(layers)
        text["mtp_hybrid_override_pattern"] = "*E"
    text["num_nextn_predict_layers"] = 1
    text = {k: v for k, v in text.items() if v is not None}
    config: dict[str, Any] = {"architectures": [arch], "model_type": model_type}
    if text_type:
        config["text_config"] = {"model_type": text_type, **text}
    else:
        config.update(text)
    if str(model_info.get("quantization", "")).startswith("nvfp4"):
        config["quantization_config"] = dict(NVFP4_QUANT)
    return config


def hub_files(model_info: Mapping[str, Any]) -> dict[str, Any]:
    """Files of the stand-in Hub snapshot: config.json and the quantization config."""
    config = hf_config(model_info)
    files: dict[str, Any] = {"config.json": config}
    if "quantization_config" in config:
        files["hf_quant_config.json"] = {"quantization": config["quantization_config"]}
    return files
