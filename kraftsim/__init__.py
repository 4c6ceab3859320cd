"""kraftsim: a simulated Apache Kafka 3.9 KRaft controller.

The repository keeps one folder per part (``rpc/``, ``metadata/``, ``controller/``, ...); this
package maps each into the one namespace by symlink (``kraftsim/rpc -> ../rpc``, see
pyproject.toml), so ``from kraftsim.metadata.log import MetadataLog`` is the only spelling.
"""

__version__ = "0.2.0"

# The modules the optional mypyc build compiles (`make compiled`, docs/deploy.md "Compiled build"): the
# replay path, where compiling gains ~1.5x. Everything else, and any install without the build,
# runs as plain Python from the same sources.
COMPILED_MODULES = (
    "kraftsim.rpc._runtime",
    "kraftsim.metadata.batch",
    "kraftsim.metadata.image.interning",
    "kraftsim.metadata.image.partition_sets",
    "kraftsim.metadata.image.topics",
    "kraftsim.metadata.image.fast_replay",
)


def compiled_modules() -> list[str]:
    """Those of COMPILED_MODULES this process runs compiled (imports them to find out), so that
    ``kraftsim --version`` and the tests can tell which build is running."""
    import importlib
    from importlib.machinery import EXTENSION_SUFFIXES

    return [name for name in COMPILED_MODULES
            if (getattr(importlib.import_module(name), "__file__", None) or "").endswith(tuple(EXTENSION_SUFFIXES))]


def build_description() -> str:
    """The build this process runs: "pure Python", or how many hot modules are compiled."""
    compiled = compiled_modules()
    if not compiled:
        return "pure Python"
    return f"compiled with mypyc: {len(compiled)} of {len(COMPILED_MODULES)} hot modules"
