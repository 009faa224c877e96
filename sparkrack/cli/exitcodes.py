"""Every exit code of the ``sparkrack`` command line, in one enum."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What a command's exit status means (argparse's own usage errors exit 2 as well)."""

    OK = 0
    """The command did what it was asked; every check passed."""
    FAILED = 1
    """Bad input (one line per problem: file, key, fix), a check that failed, an endpoint down."""
    BAD_LEVEL = 2
    """bench: a concurrency level was GARBAGE (fingerprint) or FAILED (no request succeeded)."""
    NO_TOKEN_COUNTS = 3
    """bench: a level had no token counts (no usage in the stream) without --allow-no-usage."""
