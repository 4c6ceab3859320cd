"""Every Kafka protocol message class, by schema name.

``from kraftsim.rpc.messages import BrokerHeartbeatRequest`` compiles that one schema on first
use (see :mod:`kraftsim.rpc.registry`); ``messages.pyi`` beside this file types the classes for
mypy and editors.
"""

from typing import Any

from kraftsim.rpc import registry


def __getattr__(name: str) -> Any:
    try:
        return registry.message_class(name)
    except KeyError:
        raise AttributeError(f"no Kafka protocol schema named {name}") from None
