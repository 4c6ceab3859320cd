"""What the container image's entrypoint needs: environment -> ``server.properties``, first-start
format, and the HEALTHCHECK probe.

It follows the apache/kafka image so that compose files and habits carry over: ``KAFKA_*``
variables become Kafka keys (``_`` -> ``.``, ``__`` -> ``_``, ``___`` -> ``-``, lower case),
``KRAFTSIM_*`` the same under ``kraftsim.``, ``CLUSTER_ID`` is the cluster id for ``format``, a
``server.properties`` mounted in ``/mnt/shared/config`` replaces the image's defaults, and the
JVM-only variables apache/kafka skips are skipped here too (a compose file written for that
image must not turn ``KAFKA_HEAP_OPTS`` into a bogus key). One deliberate difference: with no
mounted file, environment variables override the image defaults key by key instead of replacing
the whole file, so ``KAFKA_NODE_ID`` alone does not silently drop the listener and data dir.

The logic lives here, in the installed package, rather than in shell: the entrypoint script
calls ``python -m kraftsim.cli.container setup``, and tests run that same command.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from kraftsim.controller.configs.server_config import Config, ConfigError
from kraftsim.metadata.files import META_PROPERTIES, MetaProperties, StorageError, atomic_write, parse_java_properties

SERVER_PROPERTIES = "server.properties"

# Where things live in the image; each can be moved by the variable named beside it (which is
# why those variables are never turned into properties).
DIRS = {
    "KRAFTSIM_DEFAULT_CONFIG_DIR": "/etc/kraftsim/docker",  # the image's defaults
    "KRAFTSIM_MOUNTED_CONFIG_DIR": "/mnt/shared/config",    # the user's file, if any
    "KRAFTSIM_CONFIG_DIR": "/opt/kraftsim/config",          # the file the controller runs with
}

# apache/kafka's image skips these (JVM and log4j settings, not broker keys); so do we.
KAFKA_NOT_PROPERTIES = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_HOSTNAME",
})
# Variables kraftsim itself reads from its environment (the image sets KRAFTSIM_CODEC_CACHE to
# the codec cache its build filled): settings of the process, not keys of server.properties.
KRAFTSIM_PROCESS_VARIABLES = frozenset({"KRAFTSIM_CODEC_CACHE"})
NOT_PROPERTIES = KAFKA_NOT_PROPERTIES | frozenset(DIRS) | KRAFTSIM_PROCESS_VARIABLES

# The cluster id used when CLUSTER_ID is not set, fixed (as in apache/kafka) so that a container
# recreated over an empty volume joins the same cluster as its brokers' configuration.
DEFAULT_CLUSTER_ID = "D0JOUEx9ThOFUZNSxGVbKg"
RELEASE_VERSION = "3.9"


class SetupError(Exception):
    """Why the container cannot start (one line for the user)."""


def property_name(env_name: str) -> str | None:
    """The property an environment variable sets, or None if it sets none."""
    if env_name in NOT_PROPERTIES:
        return None
    for prefix, out in (("KAFKA_", ""), ("KRAFTSIM_", "kraftsim.")):
        if env_name.startswith(prefix) and len(env_name) > len(prefix):
            dotted = env_name[len(prefix):].lower().replace("_", ".")
            return out + dotted.replace("...", "-").replace("..", "_")
    return None


def properties_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Every property the environment sets, sorted by name so the file is stable across starts."""
    out = {}
    for name in sorted(environ):
        key = property_name(name)
        if key is not None:
            out[key] = environ[name]
    return out


def _escape(text: str, key: bool) -> str:
    """Java properties escaping, but only where needed, so the file stays readable
    (``listeners=CONTROLLER://0.0.0.0:9093``, not ``CONTROLLER\\://...``)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\" or (key and ch in "=: ") or (i == 0 and ch in " #!"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:  # newlines and non-ASCII: the file is read as latin-1
            units = ch.encode("utf-16-be", "surrogatepass")  # \uXXXX per UTF-16 unit, as Java writes
            out.extend(f"\\u{int.from_bytes(units[j:j + 2], 'big'):04x}" for j in range(0, len(units), 2))
        else:
            out.append(ch)
    return "".join(out)


def render(props: Mapping[str, str], sources: Iterable[str]) -> str:
    lines = [f"# Written by the kraftsim entrypoint from {' and '.join(sources)}; rewritten on every start."]
    lines += [f"{_escape(k, True)}={_escape(v, False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def _dir(environ: Mapping[str, str], name: str) -> Path:
    return Path(environ.get(name) or DIRS[name])


def _read(path: Path) -> dict[str, str]:
    try:
        return parse_java_properties(path.read_text("latin-1"))
    except OSError as e:
        raise SetupError(f"cannot read {path}: {e.strerror or e}") from e


def prepare_config(environ: Mapping[str, str]) -> Path:
    """Write the controller's ``server.properties``: the mounted file if there is one, else the
    image defaults, then the environment over either; check it as the controller will."""
    roles = environ.get("KAFKA_PROCESS_ROLES", "")
    if roles.strip() == "controller" and environ.get("KAFKA_ADVERTISED_LISTENERS"):
        # As apache/kafka's image: a controller-only node advertises no listeners.
        raise SetupError("KAFKA_ADVERTISED_LISTENERS is not supported on a KRaft controller.")
    mounted = _dir(environ, "KRAFTSIM_MOUNTED_CONFIG_DIR") / SERVER_PROPERTIES
    defaults = _dir(environ, "KRAFTSIM_DEFAULT_CONFIG_DIR") / SERVER_PROPERTIES
    base = mounted if mounted.is_file() else defaults
    props = _read(base) if base.is_file() else {}
    from_env = properties_from_env(environ)
    props.update(from_env)
    sources = [str(base)] + (["the environment"] if from_env else [])
    try:
        Config(props)
    except ConfigError as e:
        raise SetupError(str(e)) from e
    final_dir = _dir(environ, "KRAFTSIM_CONFIG_DIR")
    final = final_dir / SERVER_PROPERTIES
    try:
        final_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(final, render(props, sources).encode("latin-1"))
    except OSError as e:
        raise SetupError(f"cannot write {final}: {e.strerror or e}") from e
    return final


def format_once(config_path: Path, cluster_id: str) -> list[str]:
    """``kraftsim format --ignore-formatted``: formats on the first start only. A later start
    with a different CLUSTER_ID keeps the formatted id (as Kafka's image does) but says so."""
    from kraftsim.cli.storage import FormatError, format_storage

    # Unknown keys are the controller's to warn about, once, in its own log format.
    config_log = logging.getLogger("kraftsim.config")
    level = config_log.level
    config_log.setLevel(logging.ERROR)
    try:
        lines = format_storage(config_path, cluster_id, RELEASE_VERSION, ignore_formatted=True)
    except FormatError as e:
        raise SetupError(str(e)) from e
    finally:
        config_log.setLevel(level)
    cfg = Config(_read(config_path))
    meta = cfg.metadata_log_dir / META_PROPERTIES
    try:
        formatted_id = MetaProperties.read(meta).cluster_id
    except StorageError as e:
        raise SetupError(str(e)) from e
    if formatted_id != cluster_id:
        lines.append(f"WARNING: {cfg.metadata_log_dir} was formatted with cluster id {formatted_id}; "
                     f"CLUSTER_ID={cluster_id} is ignored (format a new volume to change it).")
    return lines


def setup(environ: Mapping[str, str]) -> list[str]:
    """The entrypoint's configure step; returns the lines to print."""
    out = []
    cluster_id = environ.get("CLUSTER_ID", "")
    if not cluster_id:
        cluster_id = DEFAULT_CLUSTER_ID
        out.append(f'CLUSTER_ID not set. Setting it to default value: "{cluster_id}"')
    final = prepare_config(environ)
    out.append(f"Wrote {final}")
    out.extend(format_once(final, cluster_id))
    return out


def healthcheck(config_path: Path, timeout: float) -> str:
    """GET /healthz on the controller's ``kraftsim.http.listen``; the text of a 200, else SetupError."""
    host, port = Config(_read(config_path)).get("kraftsim.http.listen")
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return str(r.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as e:
        raise SetupError(f"{url}: HTTP {e.code} {e.read().decode('utf-8', 'replace').strip()}") from e
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise SetupError(f"{url}: {reason}") from e


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    p = argparse.ArgumentParser(prog="python -m kraftsim.cli.container",
                                description="The kraftsim image's entrypoint helpers")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="write server.properties from the environment and format on first start")
    h = sub.add_parser("healthcheck", help="exit 0 if the controller's /healthz answers 200")
    h.add_argument("--config", type=Path, help="server.properties (default: the one setup wrote)")
    h.add_argument("--timeout", type=float, default=3.0)
    args = p.parse_args(argv)
    try:
        if args.command == "setup":
            for line in setup(env):
                print(line, flush=True)
        else:
            config = args.config or _dir(env, "KRAFTSIM_CONFIG_DIR") / SERVER_PROPERTIES
            print(healthcheck(config, args.timeout))
    except (SetupError, ConfigError) as e:
        print(f"kraftsim {args.command}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
