"""Every exit code of the ``sparkrack`` command line, in one enum (docs/reference/exit-codes.md is written from it)."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What a command's exit status means; the same for every command."""

    OK = 0
    """The command did what it was asked; every check passed."""
    FAILED = 1
    """Bad input (one line per problem: file, key, fix), a check that failed, an endpoint down."""
    USAGE = 2
    """The command line cannot run as given: an unknown or malformed option, a missing
    argument, a file or directory named on it that does not exist (argparse's own errors
    exit 2 as well)."""
    BAD_LEVEL = 2
    """bench: a concurrency level was GARBAGE (fingerprint), FAILED (no request succeeded) or
    WRONG-ANSWERS (the answer canary)."""
    NO_TOKEN_COUNTS = 3
    """bench: a level had no token counts (no usage in the stream) without --allow-no-usage."""
    NO_KUBECONFIG = 4
    """status: no kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/sparkrack.yaml``,
    ``~/.kube/config``): the cluster's API is absent from this machine."""
    API_UNAVAILABLE = 5
    """status: the cluster's API refused the connection, did not answer within the request
    timeout, or answered with an error."""
