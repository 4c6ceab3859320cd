"""What every ``kraftsim`` sub-command shares: its failures as one line for the user, and an
argument parser that raises rather than printing usage.

The contract (SPEC, README): bad input ends with exactly one line on stderr and a non-zero
status, never a traceback. A sub-command raises :class:`CommandError` (status 1, as Kafka's
tools exit on a TerseException) or :class:`UsageError` (a bad command line: status 2 from the
``kraftsim`` script, as argparse exits; status 1 from a tool's own ``main``, as Kafka's tools).
"""

from __future__ import annotations

import argparse


class CommandError(Exception):
    """A command that could not do its job: one line on stderr, exit status 1."""


class UsageError(CommandError):
    """A bad command line: one line on stderr."""


class Parser(argparse.ArgumentParser):
    """argparse prints its usage and the message; the contract is one line on stderr."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")
