"""The test server standing in for an engine refuses requests as the engine's API port does: the
gate in front of SGLang answers 404 for every path it does not pass on (``/server_info``, the
admin routes), whatever the key; then SGLang's auth middleware (``srt/utils/auth.py``,
``decide_request_auth``) opens ``/health*`` and ``/metrics*`` and wants the engine key for the
rest."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from sparkrack.bench.server import ServerConfig, auth_refusal, main, spawn

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback

KEYED = ServerConfig(api_key="engine-k")
GATED = ("/server_info", "/get_server_info", "/flush_cache", "/update_weights_from_tensor")


@pytest.mark.parametrize(
    ("method", "path", "header", "refused"),
    [
        ("GET", "/health", None, None),
        ("GET", "/health_generate", None, None),
        ("GET", "/metrics", None, None),
        ("OPTIONS", "/v1/chat/completions", None, None),
        ("GET", "/v1/models", None, "401 Unauthorized"),
        ("POST", "/v1/chat/completions", "Bearer wrong", "401 Unauthorized"),
        ("POST", "/v1/chat/completions", "engine-k", "401 Unauthorized"),  # no scheme
        ("POST", "/v1/chat/completions", "Bearer engine-k", None),
        ("POST", "/v1/chat/completions", "bearer engine-k", None),
        ("POST", "/v1/chat/completions", "Bearer admin-k", "401 Unauthorized"),
        ("GET", "/server_info", "Bearer engine-k", "404 Not Found"),
        ("POST", "/flush_cache", "Bearer engine-k", "404 Not Found"),
        ("POST", "/update_weights_from_tensor", None, "404 Not Found"),
    ],
)
def test_the_stand_in_decides_as_the_engine(
    method: str, path: str, header: str | None, refused: str | None
) -> None:
    assert auth_refusal(method, path, header, KEYED) == refused


def test_without_keys_the_api_is_open_and_the_gated_paths_are_not() -> None:
    """Negative control of the table above: the 401s come from the key, the 404s from the gate."""
    assert auth_refusal("POST", "/v1/models", None, ServerConfig()) is None
    for path in GATED:
        assert auth_refusal("POST", path, None, ServerConfig()) == "404 Not Found"


def status(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_server_process_takes_its_key_from_a_variable_and_answers_401() -> None:
    with spawn(["--api-key-env", "STANDIN_TEST_KEY"], env={"STANDIN_TEST_KEY": "s3cret"}) as url:
        assert status(url + "/health") == 200
        assert status(url + "/metrics") == 200
        assert status(url + "/v1/models") == 401
        assert status(url + "/v1/models", "nope") == 401
        assert status(url + "/v1/models", "s3cret") == 200
        assert status(url + "/server_info", "s3cret") == 404


def test_a_key_on_the_command_line_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--api-key", "s3cret"])
    assert exc.value.code == 2
