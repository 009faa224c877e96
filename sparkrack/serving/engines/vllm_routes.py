"""vLLM's HTTP routes past the OpenAI API, read from the pinned releases' source (0.19.0 and
0.33.0): who may call each, and when the release serves it. :class:`~sparkrack.serving.engines.
vllm.VLLM` puts its head behind the engine gate because of them."""

from __future__ import annotations

from sparkrack.serving.engines.facts import Route

# --- HTTP routes past the OpenAI API (vllm/entrypoints/..., 0.19.0 and 0.33.0) -----------------
# The key: VLLM_API_KEY adds AuthenticationMiddleware, which checks the bearer token only of paths
# under /v1 (0.19.0: openai/server_utils.py) or /v1, /v2, /inference, /cohere (0.33.0:
# serve/middleware/authenticate.py GUARDED_PREFIX). Every other route below answers anyone who
# reaches the port; "engine key" marks what both releases guard.
ALWAYS = "always (vllm serve of a generating model)"
DEV_MODE = "VLLM_SERVER_DEV_MODE=1 (denied in a profile's env)"
ROUTES: tuple[Route, ...] = (
    Route(
        "/invocations",
        "none",
        ALWAYS,
        "runs a chat, completion or pooling request: the OpenAI API without its key",
        "sagemaker/api_router.py (0.19.0); serve/sagemaker/api_router.py (0.33.0)",
    ),
    Route("/ping", "none", ALWAYS, "health (SageMaker)", "the same files as /invocations"),
    Route(
        "/scale_elastic_ep",
        "none",
        ALWAYS,
        "reconfigures the engine's expert-parallel size (new workers, new weights layout)",
        "serve/elastic_ep/api_router.py",
    ),
    Route(
        "/is_scaling_elastic_ep", "none", ALWAYS, "scaling state", "serve/elastic_ep/api_router.py"
    ),
    Route(
        "/tokenize",
        "none",
        ALWAYS,
        "runs the tokenizer and chat template",
        "serve/tokenize/api_router.py",
    ),
    Route("/detokenize", "none", ALWAYS, "runs the tokenizer", "serve/tokenize/api_router.py"),
    Route(
        "/tokenizer_info",
        "none",
        "--enable-tokenizer-info-endpoint",
        "the tokenizer's whole config and chat template",
        "serve/tokenize/api_router.py",
    ),
    Route("/load", "none", ALWAYS, "the server's load", "serve/instrumentator/basic.py"),
    Route("/version", "none", ALWAYS, "the vLLM version", "serve/instrumentator/basic.py"),
    Route(
        "/kv_event_sources",
        "none",
        "0.33.0, always",
        "KV event publishers",
        "serve/instrumentator/basic.py",
    ),
    Route(
        "/docs",
        "none",
        "unless --disable-fastapi-docs",
        "Swagger UI",
        "FastAPI (openai/api_server.py build_app)",
    ),
    Route(
        "/openapi.json",
        "none",
        "unless --disable-fastapi-docs",
        "the route schema",
        "FastAPI (build_app)",
    ),
    Route("/redoc", "none", "unless --disable-fastapi-docs", "ReDoc", "FastAPI (build_app)"),
    Route(
        "/inference/v1/generate",
        "none",
        "--tokens-only (0.19.0); generating models (0.33.0, keyed there)",
        "generation from token ids",
        "serve/disagg/api_router.py (0.19.0); scale_out/token_in_token_out/api_router.py (0.33.0)",
    ),
    Route(
        "/inference/v1/abort_requests",
        "none",
        "0.33.0, generating models (keyed there)",
        "aborts requests by id",
        "scale_out/token_in_token_out/api_router.py",
    ),
    Route(
        "/abort_requests",
        "none",
        "--tokens-only (0.19.0); 0.33.0 generating models",
        "aborts any client's requests by id",
        "serve/disagg/api_router.py; scale_out/token_in_token_out/api_router.py",
    ),
    Route(
        "/generative_scoring",
        "none",
        "0.33.0, generating models",
        "scores with the model",
        "generate/generative_scoring/api_router.py",
    ),
    Route("/cohere/v2/chat", "engine key", "0.33.0", "Cohere-style chat", "cohere/api_router.py"),
    Route(
        "/cohere/v2/chat/render", "engine key", "0.33.0", "renders a prompt", "cohere/api_router.py"
    ),
    Route("/pooling", "none", "pooling models", "runs the model", "pooling/pooling/api_router.py"),
    Route(
        "/classify", "none", "pooling models", "runs the model", "pooling/classify/api_router.py"
    ),
    Route("/score", "none", "pooling models", "runs the model", "pooling/score(ing)/api_router.py"),
    Route(
        "/rerank", "none", "pooling models", "runs the model", "pooling/score(ing)/api_router.py"
    ),
    Route(
        "/v2/rerank",
        "none",
        "pooling models (keyed in 0.33.0)",
        "runs the model",
        "pooling/score(ing)/api_router.py",
    ),
    Route(
        "/v2/embed",
        "none",
        "pooling models (keyed in 0.33.0)",
        "runs the model",
        "pooling/embed/api_router.py",
    ),
    Route(
        "/start_profile",
        "none",
        "--profiler-config",
        "starts the torch profiler, writing to disk",
        "serve/profile/api_router.py",
    ),
    Route("/stop_profile", "none", "--profiler-config", "stops it", "serve/profile/api_router.py"),
    Route(
        "/fault_tolerance/apply",
        "none",
        "0.33.0 --enable-fault-tolerance",
        "applies a recovery action to the engine",
        "serve/fault_tolerance/api_router.py",
    ),
    Route(
        "/fault_tolerance/status",
        "none",
        "0.33.0 --enable-fault-tolerance",
        "recovery state",
        "serve/fault_tolerance/api_router.py",
    ),
    Route(
        "/v1/load_lora_adapter",
        "engine key",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "loads adapter weights from a path or repo the request names (the gate's REFUSED)",
        "serve/lora/api_router.py",
    ),
    Route(
        "/v1/unload_lora_adapter",
        "engine key",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "unloads an adapter (the gate's REFUSED)",
        "serve/lora/api_router.py",
    ),
    Route(
        "/collective_rpc",
        "none",
        DEV_MODE,
        "calls any method of every worker",
        "serve/rpc/api_router.py (0.19.0); serve/dev/rpc/api_router.py (0.33.0)",
    ),
    Route(
        "/server_info",
        "none",
        DEV_MODE,
        "the engine's whole config",
        "serve/instrumentator/server_info.py (0.19.0); serve/dev/server_info/api_router.py (0.33.0)",
    ),
    Route(
        "/sleep",
        "none",
        DEV_MODE,
        "frees the weights and KV cache",
        "serve/sleep/api_router.py; serve/dev/sleep/api_router.py",
    ),
    Route(
        "/wake_up",
        "none",
        DEV_MODE,
        "reloads them",
        "serve/sleep/api_router.py; serve/dev/sleep/api_router.py",
    ),
    Route(
        "/is_sleeping",
        "none",
        DEV_MODE,
        "sleep state",
        "serve/sleep/api_router.py; serve/dev/sleep/api_router.py",
    ),
    Route(
        "/release_kv_cache_memory",
        "none",
        "0.33.0 " + DEV_MODE,
        "frees the KV cache",
        "serve/dev/sleep/api_router.py",
    ),
    Route(
        "/reset_prefix_cache",
        "none",
        DEV_MODE,
        "drops the prefix cache",
        "serve/cache/api_router.py; serve/dev/cache/api_router.py",
    ),
    Route(
        "/reset_mm_cache",
        "none",
        DEV_MODE,
        "drops the multimodal cache",
        "serve/cache/api_router.py; serve/dev/cache/api_router.py",
    ),
    Route(
        "/reset_encoder_cache",
        "none",
        DEV_MODE,
        "drops the encoder cache",
        "serve/cache/api_router.py; serve/dev/cache/api_router.py",
    ),
    *(
        Route(
            path,
            "none",
            DEV_MODE,
            "weight transfer and pausing for RL",
            "serve/rlhf/api_router.py (0.19.0); rl/online/api_router.py (0.33.0)",
        )
        for path in (
            "/pause",
            "/resume",
            "/is_paused",
            "/update_weights",
            "/init_weight_transfer_engine",
            "/get_world_size",
        )
    ),
    *(
        Route(
            path, "none", "0.33.0 " + DEV_MODE, "weight transfer for RL", "rl/online/api_router.py"
        )
        for path in (
            "/weight_info",
            "/finish_weight_update",
            "/shutdown_weight_transfer_engine",
            "/start_draft_weight_update",
            "/start_weight_update",
            "/update_weight_version",
            "/weight_checker",
        )
    ),
)
"""vLLM's routes the gate refuses. Through the gate a holder of the engine key reaches the
OpenAI API under /v1 (less :data:`~sparkrack.serving.scripts.engine_gate.REFUSED`), /health and
/metrics; without it, /health and /metrics."""
