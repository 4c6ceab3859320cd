"""Where message classes come from: schema files compiled on first use, by name or api key.

Compilation is lazy and per message so that a CLI tool touching two messages does not pay for
ninety; the controller warms every API it serves at start-up.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kraftsim.rpc.codegen import compile_message
from kraftsim.rpc.message import Message, Struct
from kraftsim.rpc.schema import MessageSpec, load_file

RPC_SCHEMAS = Path(__file__).with_name("schemas")

_lock = threading.Lock()
_classes: dict[tuple[Path, str], type[Message]] = {}
_index: dict[Path, dict[str, Path]] = {}


def _files(directory: Path) -> dict[str, Path]:
    idx = _index.get(directory)
    if idx is None:
        idx = {}
        for p in sorted(directory.glob("*.json")):
            idx[load_file(p).name] = p
        _index[directory] = idx
    return idx


def spec(name: str, directory: Path = RPC_SCHEMAS) -> MessageSpec:
    return load_file(_files(directory)[name])


def message_class(name: str, directory: Path = RPC_SCHEMAS) -> Any:
    """The compiled class of the schema whose message ``name`` is given (e.g. ``FetchRequest``).

    Typed ``Any``: the classes are generated at run time, so their fields are not known to a
    static checker (their attributes are the schema's fields in snake_case)."""
    key = (directory, name)
    cls = _classes.get(key)
    if cls is None:
        with _lock:
            cls = _classes.get(key)
            if cls is None:
                files = _files(directory)
                if name not in files:
                    raise KeyError(f"no schema named {name} in {directory}")
                cls = compile_message(load_file(files[name]), Message, Struct)
                _classes[key] = cls
    return cls


def names(directory: Path = RPC_SCHEMAS) -> list[str]:
    return list(_files(directory))


_by_key: dict[tuple[int, str], str] = {}


def _key_index() -> dict[tuple[int, str], str]:
    if not _by_key:
        for name, path in _files(RPC_SCHEMAS).items():
            s = load_file(path)
            if s.api_key is not None and s.type in ("request", "response"):
                _by_key[(s.api_key, s.type)] = name
    return _by_key


def request_class(api_key: int) -> Any:
    return message_class(_key_index()[(api_key, "request")])


def response_class(api_key: int) -> Any:
    return message_class(_key_index()[(api_key, "response")])


def api_keys() -> list[int]:
    return sorted({k for k, t in _key_index() if t == "request"})


def has_api(api_key: int) -> bool:
    return (api_key, "request") in _key_index()
