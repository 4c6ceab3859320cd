"""The controller's own faults, apart from the controller core so that the pieces it owns (the
leader balancer, the periodic tasks) can tell them apart without importing the core.
``quorum_controller`` imports them back: ``kraftsim.controller.quorum_controller.FatalControllerError``
stays a valid spelling."""

from __future__ import annotations


class FatalControllerError(Exception):
    """A fault the controller cannot continue after (replay or log failure)."""


class HandlerFaultError(Exception):
    """A handler raised something other than an ApiError: Kafka's non-fatal fault, already
    logged and counted (MetadataErrorCount) where it happened; the client gets
    UNKNOWN_SERVER_ERROR and nothing logs it a second time."""
