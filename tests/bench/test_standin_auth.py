"""The test server standing in for an engine refuses requests as SGLang's auth middleware does
(``srt/utils/auth.py``, ``decide_request_auth``): ``/health*`` and ``/metrics*`` open, every other
route the engine key, the admin routes the admin key once one is set."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from sparkrack.bench.server import ADMIN_ROUTES, ServerConfig, auth_refusal, main, spawn

KEYED = ServerConfig(api_key="engine-k", admin_api_key="admin-k")


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
        ("POST", "/flush_cache", "Bearer engine-k", "401 Unauthorized"),
        ("POST", "/flush_cache", "Bearer admin-k", None),
        ("POST", "/flush_cache", None, "401 Unauthorized"),
    ],
)
def test_the_stand_in_decides_as_the_engine(
    method: str, path: str, header: str | None, refused: str | None
) -> None:
    assert auth_refusal(method, path, header, KEYED) == refused


def test_with_only_the_engine_key_it_opens_the_admin_routes() -> None:
    only = ServerConfig(api_key="engine-k")
    assert auth_refusal("POST", "/flush_cache", "Bearer engine-k", only) is None
    assert auth_refusal("POST", "/flush_cache", None, only) == "401 Unauthorized"


def test_without_keys_everything_is_open() -> None:
    """Negative control of the table above: the refusals come from the keys."""
    for path in ("/v1/models", *ADMIN_ROUTES):
        assert auth_refusal("POST", path, None, ServerConfig()) is None


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


def test_a_key_on_the_command_line_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--api-key", "s3cret"])
    assert exc.value.code == 2
