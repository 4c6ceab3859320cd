"""Every metadata record and data-file class (Raft control records, QuorumStateData), by name.

``from kraftsim.metadata.messages import PartitionRecord`` compiles that one schema on first use;
``messages.pyi`` beside this file types the classes for mypy and editors.
"""

from pathlib import Path
from typing import Any

from kraftsim.rpc import registry

_SCHEMAS = Path(__file__).with_name("schemas")


def __getattr__(name: str) -> Any:
    try:
        return registry.message_class(name, _SCHEMAS)
    except KeyError:
        raise AttributeError(f"no metadata schema named {name}") from None
