"""The quorum's timings, under Kafka's keys and with Kafka's defaults (QuorumConfig).

They are short next to most Kafka timeouts on purpose: a KRaft standby controller is hot, so a
leader change should take a few seconds at most.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

PREFIX = "controller.quorum."


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    election_timeout_ms: int = 1_000  # a voter with no leader waits a random [T, 2T) before standing
    fetch_timeout_ms: int = 2_000  # a follower with no answer from its leader for this long stands
    election_backoff_max_ms: int = 1_000  # the cap of the exponential backoff between lost elections
    request_timeout_ms: int = 2_000  # an unanswered request is given up after this
    retry_backoff_ms: int = 20  # and a failed one retried no sooner than this
    append_linger_ms: int = 25  # the leader gathers appends this long before writing them
    fetch_max_wait_ms: int = 500  # a follower's long poll (KafkaRaftClient.MAX_FETCH_WAIT_MS, not a config)

    KEYS = {
        "election.timeout.ms": "election_timeout_ms",
        "fetch.timeout.ms": "fetch_timeout_ms",
        "election.backoff.max.ms": "election_backoff_max_ms",
        "request.timeout.ms": "request_timeout_ms",
        "retry.backoff.ms": "retry_backoff_ms",
        "append.linger.ms": "append_linger_ms",
    }

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{f.name} must be a non-negative integer, not {value!r}")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> QuorumConfig:
        """From server.properties: ``controller.quorum.*.ms`` keys override the defaults;
        other keys are not this class's concern. ValueError names a bad key."""
        values: dict[str, int] = {}
        for suffix, attr in cls.KEYS.items():
            key = PREFIX + suffix
            if key in props:
                try:
                    values[attr] = int(props[key].strip())
                except ValueError:
                    raise ValueError(f"{key}: not an integer: {props[key]!r}") from None
                if values[attr] < 0:
                    raise ValueError(f"{key}: must not be negative: {props[key]!r}")
        return cls(**values)
