"""The fields of vLLM's ``SpeculativeConfig`` a profile's ``vllm.speculative_config`` may set.

vLLM reads the object whole (``--speculative_config '<json>'``) into ``SpeculativeConfig``
(vllm/config/speculative.py), whose fields include the draft model's repo or path, the revision of
its code and a load config of its own (a directory, loader plugins). The profile schema holds the
object to :data:`SPECULATIVE_FIELDS`, each field with its exact form, and refuses every other
field. The draft ``model`` is an HF repo id (a path is refused) and, loaded with the model's
``trust_remote_code``, is gated by ``serving_remote_code_repos`` (:mod:`sparkrack.serving.trust`,
the knob's ``code="repo"``). ``tests/serving/engines/test_vllm_speculative.py`` holds both tables
to the real class of the engine-check environment: every field of it is allowed or refused here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from sparkrack.serving.profile.knobs import HF_ID, IDENT, REVISION, TOKEN_TREE

_POSITIVE = {"type": "integer", "minimum": 1}
_FLAG = {"type": "boolean"}
_SHARE = {"type": "number", "minimum": 0, "maximum": 1}
SPECULATIVE_FIELDS: Mapping[str, Any] = MappingProxyType(
    {
        "method": {"type": "string", "pattern": IDENT},
        "num_speculative_tokens": _POSITIVE,
        # The draft repo: gated by serving_remote_code_repos when it loads with the model's
        # trust_remote_code (the row's code="repo"); a path is refused by the pattern.
        "model": {"type": "string", "pattern": HF_ID},
        "revision": {"type": "string", "pattern": REVISION},
        "draft_tensor_parallel_size": _POSITIVE,
        "quantization": {"type": "string", "pattern": IDENT},
        "moe_backend": {"type": "string", "pattern": IDENT},
        "max_model_len": _POSITIVE,
        "enforce_eager": _FLAG,
        "disable_padded_drafter_batch": _FLAG,
        "use_local_argmax_reduction": _FLAG,
        "parallel_drafting": _FLAG,
        "prompt_lookup_max": _POSITIVE,
        "prompt_lookup_min": _POSITIVE,
        # Read with ast.literal_eval: a list of tuples of digits.
        "speculative_token_tree": {"type": "string", "pattern": TOKEN_TREE},
        "suffix_decoding_max_tree_depth": _POSITIVE,
        "suffix_decoding_max_cached_requests": {"type": "integer", "minimum": 0},
        "suffix_decoding_max_spec_factor": {"type": "number", "minimum": 0},
        "suffix_decoding_min_token_prob": _SHARE,
        "rejection_sample_method": {"type": "string", "pattern": IDENT},
        "synthetic_acceptance_rate": _SHARE,
    }
)
"""The fields of vLLM's ``SpeculativeConfig`` (vllm/config/speculative.py, 0.19.0) a profile may
set, each with its exact form; every other field is refused by the schema."""
SPECULATIVE_REFUSED: Mapping[str, str] = MappingProxyType(
    {
        "draft_load_config": "loads the draft from a directory of its own, with loader plugins "
        "and extra loader config",
        "code_revision": "picks the revision of the draft repo's Python code apart from its "
        "weights",
        "tensor_parallel_size": "only makes vLLM warn: the draft's is draft_tensor_parallel_size",
        "target_model_config": "is filled in by vLLM from the model",
        "target_parallel_config": "is filled in by vLLM from the model",
        "draft_model_config": "is filled in by vLLM from the draft model",
        "draft_parallel_config": "is filled in by vLLM from the draft model",
    }
)
"""The fields of ``SpeculativeConfig`` a profile may not set, and why (a test holds the two
tables to the real class of the engine-check environment)."""
