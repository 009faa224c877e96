"""Run an engine's own argument parser and start-up checks on rendered argvs, off the GPU.

Runs in an isolated interpreter (``python -I``) whose ``sys.path`` holds only the engine's
cached environment (see ``sparkrack/serving/enginecheck/upstream.py``). It reads one JSON request on
stdin and writes one JSON answer to the file the request names.

Stand-ins replace only what needs a GPU or the network:
- a GB10 (SM 12.1, CUDA 13, 128 GB) answers torch.cuda's and NVML's device queries;
- the compiled extensions that were not installed (CUDA kernels) and the packages named in the
  request's ``standins`` import as inert modules;
- ``torch.compile`` and fake-kernel registration become identity decorators (nothing is traced);
- the model's Hub repository is an offline Hugging Face cache holding a ``config.json`` built from
  the profile's ``model_info``; the engine loads it with its own config code.
Parsing, post-init handling and start-up checks are the engine's own code.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import re
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

GB10_MEMORY = 128 * 10**9
GB10 = types.SimpleNamespace(
    name="NVIDIA GB10",
    major=12,
    minor=1,
    total_memory=GB10_MEMORY,
    multi_processor_count=48,
    L2_cache_size=24 * 2**20,
    uuid="GPU-00000000-0000-0000-0000-000000000000",
    warp_size=32,
    gcnArchName="",
    is_integrated=True,
)
SNAPSHOT = "0" * 40


class _InertMeta(type):
    """Class of inert stand-ins: every attribute, call, item or union is another inert value."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return inert(f"{cls.__name__}.{name}")

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: keep the function
        return type.__call__(cls)

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __bool__(cls) -> bool:
        return False


class _InertBase:
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return inert(f"{type(self).__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return self


def inert(name: str) -> Any:
    return _InertMeta(name, (_InertBase,), {})


class _InertModule(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return inert(f"{self.__name__}.{name}")


class StandinFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the named modules (and their submodules) as inert modules."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def _covers(self, name: str) -> bool:
        return any(name == n or name.startswith(n + ".") for n in self.names)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not self._covers(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _InertModule(spec.name)
        if spec.name == "triton":
            module.__version__ = "3.5.0"  # type: ignore[attr-defined]
            target = types.SimpleNamespace(backend="cuda", arch=121, warp_size=32)
            props = {"multiprocessor_count": GB10.multi_processor_count, "max_shared_mem": 101376}
            active = types.SimpleNamespace(
                get_current_target=lambda: target,
                utils=types.SimpleNamespace(get_device_properties=lambda index: props),
            )
            module.runtime = types.SimpleNamespace(  # type: ignore[attr-defined]
                driver=types.SimpleNamespace(active=active)
            )
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _identity_decorator(model: Any = None, *args: Any, **kwargs: Any) -> Any:
    if model is not None and callable(model):
        return model
    return lambda fn: fn


def _register_fake(*args: Any, **kwargs: Any) -> Any:
    if len(args) > 1 and callable(args[1]):
        return args[1]
    return lambda fn: fn


def install_gb10(torch: Any) -> None:
    """torch.cuda answers as one GB10; triton is absent to torch itself; nothing is compiled."""
    torch.version.cuda = "13.0"
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    # The stateless count engines take before CUDA is initialized (vLLM's
    # cuda_device_count_stateless): torch's own NVML query.
    cuda._device_count_nvml = lambda: 1
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.get_device_capability = lambda device=None: (GB10.major, GB10.minor)
    cuda.get_device_name = lambda device=None: GB10.name
    cuda.get_device_properties = lambda device=None: GB10
    cuda.mem_get_info = lambda device=None: (GB10_MEMORY - 2 * 10**9, GB10_MEMORY)
    cuda.is_bf16_supported = lambda *a, **k: True
    import torch.utils._triton as torch_triton  # type: ignore[import-not-found]

    for name in ("has_triton_package", "has_triton", "has_triton_tma", "has_triton_tma_device"):
        if hasattr(torch_triton, name):
            setattr(torch_triton, name, lambda *a, **k: False)
    torch.compile = _identity_decorator
    torch.library.register_fake = _register_fake
    torch.library.impl_abstract = _register_fake


def install_nvml(nvml: Any) -> None:
    """NVML (vLLM's platform probe) answers as one GB10."""
    memory = types.SimpleNamespace(total=GB10_MEMORY, free=GB10_MEMORY - 2 * 10**9, used=2 * 10**9)
    nvml.nvmlInit = lambda *a: None
    nvml.nvmlShutdown = lambda *a: None
    nvml.nvmlDeviceGetCount = lambda: 1
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetCudaComputeCapability = lambda handle: (GB10.major, GB10.minor)
    nvml.nvmlDeviceGetName = lambda handle: GB10.name
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: memory
    nvml.nvmlDeviceGetUUID = lambda handle: GB10.uuid


def write_hub_cache(root: str, models: dict[str, dict[str, Any]]) -> None:
    """An offline Hugging Face cache holding each model's config.json (and any extra files)."""
    for model, files in models.items():
        repo = os.path.join(root, "hub", "models--" + model.replace("/", "--"))
        snap = os.path.join(repo, "snapshots", SNAPSHOT)
        os.makedirs(snap, exist_ok=True)
        os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
        with open(os.path.join(repo, "refs", "main"), "w", encoding="utf-8") as fh:
            fh.write(SNAPSHOT)
        for name, content in files.items():
            with open(os.path.join(snap, name), "w", encoding="utf-8") as fh:
                fh.write(content if isinstance(content, str) else json.dumps(content))
        if not os.path.exists(os.path.join(snap, "tokenizer.json")):
            write_tokenizer(snap)


def write_tokenizer(snap: str) -> None:
    """A three-token tokenizer: engines that load the tokenizer at start-up find one."""
    from tokenizers import Tokenizer, models  # type: ignore[import-not-found]

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(os.path.join(snap, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
    }
    with open(os.path.join(snap, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh)


@contextlib.contextmanager
def rank_environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit: {exc.code}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"


def run_quiet(fn: Callable[[], Any]) -> tuple[Any, str]:
    """Call ``fn`` with stdout/stderr captured (argparse prints its error before exiting)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        result = fn()
    return result, out.getvalue()


# --- per engine -------------------------------------------------------------------------------


_READ = re.compile(
    r"""os\.(?:getenv|environ\.get|environ\.setdefault)\(\s*["']([A-Z0-9_]+)["']"""
    r"""|os\.environ\[\s*["']([A-Z0-9_]+)["']\s*\]"""
)


def read_directly(package_dir: str, prefix: str) -> set[str]:
    """Environment names the package's own source reads with ``os.getenv``/``os.environ``
    (outside its registry of variables), those starting with ``prefix``."""
    found: set[str] = set()
    for folder, _, files in os.walk(package_dir):
        for name in files:
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as source:
                for match in _READ.finditer(source.read()):
                    found.add(match.group(1) or match.group(2))
    return {n for n in found if n.startswith(prefix)}


class SGLang:
    env_prefixes = ("SGLANG_", "SGL_")

    def __init__(self) -> None:
        import sglang.srt.server_args as server_args  # type: ignore[import-not-found]

        self.server_args = server_args

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser()
        self.server_args.ServerArgs.add_cli_args(parser)
        return parser

    def check(self, argv: list[str]) -> None:
        args = self.server_args.prepare_server_args(argv)
        args.check_server_args()

    def known_env(self) -> set[str]:
        import sglang
        from sglang.srt import environ

        names = {n for n, v in vars(environ.Envs).items() if isinstance(v, environ.EnvField)}
        names |= read_directly(os.path.dirname(sglang.__file__), "SGLANG_")
        return names | {"SGL_" + n[len("SGLANG_") :] for n in names if n.startswith("SGLANG_")}


# The ParallelConfig fields a vLLM rank's config is built with (vllm/config/parallel.py), as
# the check reports them: the ranks of one launch must agree on every one but the rank's own.
PARALLEL_FACTS = (
    "nnodes",
    "node_rank",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "data_parallel_rank",
    "master_addr",
    "master_port",
    "data_parallel_master_ip",
    "data_parallel_rpc_port",
)

PLUGIN_STANDIN = """
from vllm.reasoning import ReasoningParser, ReasoningParserManager


@ReasoningParserManager.register_module({name!r})
class StandinReasoningParser(ReasoningParser):
    def is_reasoning_end(self, input_ids):
        return True

    def extract_content_ids(self, input_ids):
        return list(input_ids)

    def extract_reasoning(self, model_output, request):
        return None, model_output

    def extract_reasoning_streaming(self, *args, **kwargs):
        return None
"""
"""The model repo's reasoning-parser plugin, offline: a parser under the profile's name."""


class VLLM:
    env_prefixes = ("VLLM_",)

    # torch.ops namespaces that vLLM's compiled extensions register (kernels: inert here).
    op_namespaces = ("_C", "_moe_C", "_C_cache_ops", "_C_custom_ar", "_flashmla_C")

    def __init__(self) -> None:
        import torch

        for namespace in self.op_namespaces:
            setattr(torch.ops, namespace, inert(f"torch.ops.{namespace}")())
        import vllm.third_party.pynvml as nvml  # type: ignore[import-not-found]

        install_nvml(nvml)
        import vllm.entrypoints.cli.serve as serve  # type: ignore[import-not-found]
        import vllm.model_executor.models.registry as registry  # type: ignore[import-not-found]
        from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]

        # The model-class inspection runs in this process, under the same stand-ins.
        registry._run_in_subprocess = lambda fn: fn()  # noqa: SLF001
        self.engine_args = AsyncEngineArgs
        self.serve = serve  # what `vllm serve` parses and validates with

    def parser(self) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self.serve.make_arg_parser(
            self.serve.FlexibleArgumentParser()
        )
        return parser

    def check(self, argv: list[str]) -> dict[str, str]:
        # `vllm serve MODEL ...` takes the model as --model or as the positional model_tag.
        namespace = self.parser().parse_args(argv)
        if getattr(namespace, "model_tag", None):
            namespace.model = namespace.model_tag
        validate = getattr(self.serve, "validate_parsed_serve_args", None)
        if validate is not None:
            validate(namespace)
        self.import_plugin(namespace)
        engine_args = self.engine_args.from_cli_args(namespace)
        # `vllm serve --headless` builds its config as run_headless does (entrypoints/cli/serve.py).
        config = engine_args.create_engine_config(
            headless=bool(getattr(namespace, "headless", False))
        )
        parallel = config.parallel_config
        return {name: str(getattr(parallel, name)) for name in PARALLEL_FACTS}

    def import_plugin(self, namespace: argparse.Namespace) -> None:
        """`vllm serve` imports the reasoning-parser plugin before it builds the config (serve.py:
        run_server and run_headless); the config of later releases looks the parser up by name.

        The plugin is a file of the model repo that the pod's init container copies to its path;
        offline, a file that registers the ``--reasoning-parser`` name stands in for it, as the
        model's config.json stands in for the Hub. A path that exists is imported as it is.
        """
        path = getattr(namespace, "reasoning_parser_plugin", None)
        if not path or len(path) <= 3:  # vLLM's own test for "a plugin was given"
            return
        from vllm.reasoning import ReasoningParserManager  # type: ignore[import-not-found]

        if not os.path.exists(path):
            name = getattr(namespace, "reasoning_parser", None) or ""
            path = os.path.join(os.getcwd(), "reasoning_parser_standin.py")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(PLUGIN_STANDIN.format(name=name))
        ReasoningParserManager.import_reasoning_parser(path)

    def adapt_hub(self, hub: str, models: dict[str, dict[str, Any]]) -> None:
        """Model types this transformers lacks load as the checkpoint's remote code would.

        The real checkpoints ship their config class as remote code (``auto_map``); the
        stand-in's remote code is vLLM's own config class of that model type.
        """
        import transformers  # type: ignore[import-not-found]
        import vllm.transformers_utils.configs as configs  # type: ignore[import-not-found]

        for files in models.values():
            config = files["config.json"]
            model_type = config.get("model_type")
            if model_type in transformers.CONFIG_MAPPING:
                continue
            for name in getattr(configs, "__all__", dir(configs)):
                cls = getattr(configs, name, None)
                if getattr(cls, "model_type", None) == model_type:
                    config["auto_map"] = {"AutoConfig": f"configuration_standin.{name}"}
                    files["configuration_standin.py"] = (
                        f"from vllm.transformers_utils.configs import {name}  # noqa: F401\n"
                    )
                    break
        write_hub_cache(hub, models)

    def known_env(self) -> set[str]:
        import vllm.envs as envs  # type: ignore[import-not-found]

        return set(envs.environment_variables)


ENGINES: dict[str, Callable[[], Any]] = {"sglang": SGLang, "vllm": VLLM}


def option_dest(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The dest the parser resolves one option word to (its own preprocessing included)."""
    seen: list[str] = []

    class Stop(Exception):
        pass

    original = argparse.ArgumentParser._parse_known_args

    def capture(self: argparse.ArgumentParser, arg_strings: list[str], *a: Any, **k: Any) -> Any:
        seen.extend(arg_strings)
        raise Stop

    argparse.ArgumentParser._parse_known_args = capture  # type: ignore[method-assign]
    try:
        with contextlib.suppress(Stop):
            run_quiet(lambda: parser.parse_args([word]))
    finally:
        argparse.ArgumentParser._parse_known_args = original  # type: ignore[method-assign]
    normalized = seen[0] if seen else word
    try:
        found = parser._parse_optional(normalized)  # noqa: SLF001
    except SystemExit:
        return None  # ambiguous abbreviation
    if isinstance(found, list):  # Python >= 3.12.7 returns every match
        found = found[0] if len(found) == 1 else None
    if not found or found[0] is None:
        return None
    dest: str = found[0].dest
    return dest


def main() -> None:
    request = json.load(sys.stdin)
    import torch

    install_gb10(torch)
    # torch's compiler imports before the stand-ins, so that torch sees no triton.
    for name in request.get("torch_preimport", []):
        importlib.import_module(name)
    sys.meta_path.append(StandinFinder(request["standins"]))
    hub = os.path.join(os.getcwd(), "hub")  # the caller's scratch directory, removed after
    write_hub_cache(hub, request.get("models", {}))
    os.environ.update(
        {
            "HF_HOME": hub,
            "HF_HUB_CACHE": os.path.join(hub, "hub"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_MODULES_CACHE": os.path.join(hub, "modules"),
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    answer: dict[str, Any] = {}
    try:
        engine, _ = run_quiet(ENGINES[request["dist"]])
        if hasattr(engine, "adapt_hub"):
            engine.adapt_hub(hub, request.get("models", {}))
    except BaseException as exc:  # the engine does not even import: every answer is this error
        answer["fatal"] = describe(exc) + "\n" + traceback.format_exc()[-3000:]
        engine = None
    if engine is not None:
        answer["known_env"] = sorted(engine.known_env())
        answer["env_prefixes"] = list(engine.env_prefixes)
        if "words" in request:
            parser = engine.parser()
            answer["dests"] = [option_dest(parser, w) for w in request["words"]]
        verdicts = []
        for job in request.get("jobs", []):
            error = ""
            facts = None
            out = io.StringIO()
            try:
                with (
                    rank_environment(job["env"]),
                    contextlib.redirect_stdout(out),
                    contextlib.redirect_stderr(out),
                ):
                    facts = engine.check(list(job["argv"]))
            except ImportError as exc:  # a missing stand-in, not the engine's verdict
                answer["fatal"] = describe(exc) + "\n" + traceback.format_exc()[-3000:]
                break
            except BaseException as exc:  # the verdict is whatever the engine raised
                error = describe(exc)
                lines = out.getvalue().strip().splitlines()
                if isinstance(exc, SystemExit) and lines:
                    error += f" ({lines[-1]})"  # argparse's own message
            verdicts.append(
                {
                    "label": job["label"],
                    "ok": not error,
                    "error": error,
                    "facts": facts if not error and isinstance(facts, dict) else {},
                }
            )
        answer["verdicts"] = verdicts
    with open(request["answer"], "w", encoding="utf-8") as fh:
        json.dump(answer, fh)


if __name__ == "__main__":
    main()
