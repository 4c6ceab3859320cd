"""A route is checked by mypy against its API's classes wherever it is built, and its typed
constructor is the dataclass's own.

``Route`` declares, for mypy only, an ``__init__`` typed with the classes of its key's API
(``controller/routes.py``); at run time the dataclass makes its own. The first test holds the two
to the same parameters. The second runs mypy on routes built as the managers build them, inside
``return [...]`` of a ``routes()`` returning ``list[Route]``, where a route generic in its
classes was checked against nothing: a wrong handler, error builder or timeout must be an error
there, and a right one not.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from kraftsim.controller import routes
from kraftsim.controller.routes import Route

REPO = Path(__file__).resolve().parents[1]


def test_the_typed_constructor_is_the_dataclass_s() -> None:
    tree = ast.parse(Path(routes.__file__).read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Route"]
    [init] = [n for block in cls.body if isinstance(block, ast.If)
              for n in block.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    args = init.args.args[1:]  # self
    declared = [(a.arg, None) for a in args[:len(args) - len(init.args.defaults)]]
    declared += [(a.arg, eval(ast.unparse(d), vars(routes)))  # noqa: S307 - our own source
                 for a, d in zip(args[len(args) - len(init.args.defaults):], init.args.defaults, strict=True)]
    made = [(p.name, None if p.default is p.empty else p.default) for p in inspect.signature(Route).parameters.values()]
    assert declared == made


PROBE = '''
from __future__ import annotations

from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import Dispatcher, RequestContext
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse


def create(request: CreateTopicsRequest, ctx: RequestContext) -> ControllerResult[CreateTopicsResponse]:
    raise NotImplementedError


def delete(request: DeleteTopicsRequest, ctx: RequestContext) -> ControllerResult[DeleteTopicsResponse]:
    raise NotImplementedError


def delete_error(request: DeleteTopicsRequest, version: int, code: int, message: str | None) -> Message:
    raise NotImplementedError


def serve_delete(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    raise NotImplementedError


def routes() -> list[Route]:
    return [
        Route(Api.CREATE_TOPICS, "createTopics", create, timeout_ms=lambda r: r.timeout_ms),  # right
        Route(Api.DELETE_TOPICS, "deleteTopics", delete, error=delete_error),  # right
        Route(Api.CREATE_TOPICS, "createTopics", delete),  # wrong
        Route(Api.CREATE_TOPICS, "createTopics", create, error=delete_error),  # wrong
        Route(Api.CREATE_TOPICS, "createTopics", create, timeout_ms=lambda r: r.topic_names),  # wrong
    ]


def install(d: Dispatcher) -> None:
    d.register(Api.DELETE_TOPICS, serve_delete)  # right
    d.register(Api.CREATE_TOPICS, serve_delete)  # wrong
'''


def test_mypy_checks_each_route_against_its_key(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra: pip install -e '.[dev]'")
    probe = tmp_path / "probe_routes.py"
    probe.write_text(PROBE)
    res = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", str(probe)], cwd=REPO,
                         capture_output=True, text=True)
    lines = PROBE.splitlines()
    # By file name: mypy's cache may give the path of an earlier run's probe of the same text.
    flagged = {int(line.split(":")[1]) for line in res.stdout.splitlines()
               if line.split(":")[0].endswith("/probe_routes.py")}
    assert {lines[n - 1].rsplit("# ", 1)[-1] for n in flagged} == {"wrong"}, res.stdout
    assert len(flagged) == sum(line.endswith("# wrong") for line in lines), res.stdout
