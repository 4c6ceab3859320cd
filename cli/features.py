"""``kraftsim features``: ``kafka-features.sh`` against a kraftsim controller.

It speaks only the Kafka protocol (ApiVersions v4 for ``describe``, UpdateFeatures for the rest)
so it works against any node that answers those APIs, and prints exactly what the
``FeatureCommand`` of the controller's release prints (``--release`` names another; by default
the controller's ApiVersions tells which): scripts written for Kafka's tool parse our output
unchanged. From 4.0 ``--release-version`` sets every production feature to its default at that
metadata.version, as Kafka's 4.x tool does.

Exit status: 0 on success; 1 when a feature update failed, the controller cannot be reached or a
flag value is bad, with exactly one line on stderr (never a traceback). Kafka's tool also exits
1 in all those cases.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from kraftsim.cli import tool_client
from kraftsim.cli.common import CommandError, Parser, UsageError
from kraftsim.metadata import versions
from kraftsim.rpc import messages
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.error_codes import ErrorCode, generic_message

if TYPE_CHECKING:
    from kraftsim.rpc.messages import ApiVersionsResponse

UPDATE_FEATURES = 57
REQUEST_TIMEOUT_S = tool_client.REQUEST_TIMEOUT_S
REQUEST_TIMEOUT_MS = 30_000
"""The admin client's request.timeout.ms: what it puts in UpdateFeatures' timeoutMs."""

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3

T = TypeVar("T")


# ----- command line -------------------------------------------------------------------------

def _configure(p: argparse.ArgumentParser) -> None:
    """Kafka's FeatureCommand flags. The bootstrap flags are also accepted after the
    sub-command, a convenience Kafka lacks; neither position changes their meaning."""
    _bootstrap_flags(p, argparse.SUPPRESS)
    p.add_argument("--release", choices=versions.release_lines(), default=None,
                   help="the Kafka release whose tool to be (default: the controller's, from its ApiVersions)")
    p.add_argument("--command-config", metavar="FILE",
                   help="accepted for kafka-features.sh parity; the file must be readable, its "
                        "contents are not used (kraftsim speaks PLAINTEXT only)")
    sub = p.add_subparsers(dest="features_command", metavar="{describe,upgrade,downgrade,disable}")
    sub.required = True
    d = sub.add_parser("describe", help="Describes the current active feature flags.")
    _bootstrap_flags(d, argparse.SUPPRESS)
    u = sub.add_parser("upgrade", help="Upgrade one or more feature flags.")
    _metadata_flags(u, "upgrade", "3.3-IV3")
    u.add_argument("--feature", action="append", metavar="NAME=LEVEL",
                   help="A feature upgrade we should perform, in feature=level format. For "
                        "example: `metadata.version=5`.")
    u.add_argument("--dry-run", action="store_true", help="Validate this upgrade, but do not perform it.")
    _bootstrap_flags(u, argparse.SUPPRESS)
    dg = sub.add_parser("downgrade", help="Downgrade one or more feature flags.")
    _metadata_flags(dg, "downgrade", "3.3-IV0")
    dg.add_argument("--feature", action="append", metavar="NAME=LEVEL",
                    help="A feature downgrade we should perform, in feature=level format. For "
                         "example: `metadata.version=5`.")
    dg.add_argument("--unsafe", action="store_true",
                    help="Perform this downgrade even if it may irreversibly destroy metadata.")
    dg.add_argument("--dry-run", action="store_true", help="Validate this downgrade, but do not perform it.")
    _bootstrap_flags(dg, argparse.SUPPRESS)
    ds = sub.add_parser("disable", help="Disable one or more feature flags. This is the same as "
                                        "downgrading the version to zero.")
    ds.add_argument("--feature", action="append", metavar="NAME", help="A feature flag to disable.")
    ds.add_argument("--unsafe", action="store_true",
                    help="Disable this feature flag even if it may irreversibly destroy metadata.")
    ds.add_argument("--dry-run", action="store_true", help="Perform a dry-run of this disable operation.")
    _bootstrap_flags(ds, argparse.SUPPRESS)
    p.set_defaults(func=run)


def _bootstrap_flags(p: argparse.ArgumentParser, default: object) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", default=default,
                   help="A comma-separated list of host:port pairs to use for establishing the "
                        "connection to the Kafka cluster.")
    g.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]", default=default,
                   help="A comma-separated list of host:port pairs to use for establishing the "
                        "connection to the KRaft quorum.")


def _metadata_flags(p: argparse.ArgumentParser, op: str, example: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--metadata", metavar="VERSION",
                   help=f"The level to which we should {op} the metadata. For example, {example}.")
    # Kafka 4.0's name: in 3.9 the same as --metadata, from 4.0 it also sets every production
    # feature to its default at that level.
    g.add_argument("--release-version", metavar="VERSION",
                   help=f"The release to which we should {op} the cluster's features (from 4.0 every feature; "
                        "in 3.9 the same as --metadata).")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``features`` to the ``kraftsim`` parser; its handler is ``args.func(args) -> int``."""
    p = subparsers.add_parser("features", help="read and change finalized features (kafka-features.sh)",
                              description="This tool manages feature flags in Kafka.")
    _configure(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kraftsim features", description="This tool manages feature flags in Kafka.")
    _configure(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kraftsim features`` with ``argv`` (without the ``features`` word)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 1
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Execute parsed arguments; every failure becomes one stderr line and status 1."""
    try:
        addresses = _bootstrap(args)
        if args.command_config:
            _check_readable(args.command_config)
        cmd = args.features_command
        chosen = versions.release(args.release) if args.release else None
        if cmd == "describe":
            lines = asyncio.run(_on_any(addresses, lambda c: describe(c, chosen)))
            for line in lines:
                print(line)
            return 0
        if cmd == "disable":
            upgrade_type = UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
        else:
            upgrade_type = UPGRADE if cmd == "upgrade" else (
                UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE)

        def updates_for(release: versions.Release) -> dict[str, int]:
            if cmd == "disable":
                updates = _disable_updates(args.feature or [])
            else:
                given = getattr(args, "release_version", None)
                updates = _level_updates(args.metadata if given is None else given, args.feature or [], release,
                                         from_release_version=given is not None)
            if not updates:
                raise CommandError(f"You must specify at least one feature to {cmd}")
            return updates

        # A bad value is refused before connecting when every release refuses it alike (a
        # malformed feature=level) or the release is given; one only some releases know is
        # judged by the controller's release, in its words (3.9's if it cannot be reached).
        unreachable_error = _refusal_before_connecting(updates_for, chosen)

        def checked(release: versions.Release) -> dict[str, int]:
            try:
                return updates_for(release)
            except CommandError as e:
                raise _Refused(str(e)) from None

        try:
            updates, outcome = asyncio.run(_on_any(addresses, lambda c: update_features(
                c, checked, upgrade_type, bool(args.dry_run), chosen)))
        except _Refused:
            raise
        except CommandError:
            if unreachable_error is not None:
                raise unreachable_error from None
            raise
        return _print_outcome(cmd, updates, outcome, bool(args.dry_run))
    except CommandError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


class _Refused(CommandError):
    """A value the controller's release refuses (not a connection failure)."""


def _refusal_before_connecting(updates_for: Callable[[versions.Release], dict[str, int]],
                               chosen: versions.Release | None) -> CommandError | None:
    """Raise now what every candidate release refuses alike (or the chosen one refuses); else
    the default release's refusal to report if the controller cannot be asked, or None when
    some release takes the value."""
    candidates = [chosen] if chosen is not None else [versions.release(x) for x in versions.release_lines()]
    refusals: list[CommandError] = []
    for candidate in candidates:
        try:
            updates_for(candidate)
            return None
        except CommandError as e:
            refusals.append(e)
    if chosen is not None or len({str(e) for e in refusals}) == 1:
        raise refusals[0]
    return refusals[0]  # the default release's (3.9, the first)


def _check_readable(path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise CommandError(f"cannot read {path}: {e.strerror or e}") from None


# ----- parsing values -------------------------------------------------------------------------

def _bootstrap(args: argparse.Namespace) -> list[tuple[str, int]]:
    server = getattr(args, "bootstrap_server", None)
    controller = getattr(args, "bootstrap_controller", None)
    if server and controller:
        raise UsageError("kraftsim features: argument --bootstrap-controller: not allowed with "
                          "argument --bootstrap-server")
    text = server or controller
    if not text:
        raise UsageError("kraftsim features: one of the arguments --bootstrap-server "
                          "--bootstrap-controller is required")
    return parse_bootstrap(text)


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    return tool_client.parse_bootstrap(text, "kraftsim features")


_SHORT = re.compile(r"[+-]?[0-9]+")


def parse_name_and_level(text: str) -> tuple[str, int]:
    """FeatureCommand.parseNameAndLevel, with its messages."""
    idx = text.find("=")
    if idx < 0:
        raise CommandError(f"Can't parse feature=level string {text}: equals sign not found.")
    name, level = text[:idx].strip(), text[idx + 1:].strip()
    if not _SHORT.fullmatch(level) or not -32768 <= int(level) <= 32767:
        raise CommandError(f"Can't parse feature=level string {text}: unable to parse {level} as a short.")
    return name, int(level)


def parse_metadata_version(text: str, release: versions.Release | None = None) -> int:
    """MetadataVersion.fromVersionString: "3.9-IV0", "3.9" (latest production level of that
    release) or "3.9.1" (patch ignored); otherwise the release's tool's refusal."""
    release = release or versions.release()
    segments = text.split(".")
    key = text if len(segments) <= 2 else ".".join(segments[:2])
    try:
        return release.from_name(key)
    except KeyError:
        pass
    if release.is_3x:
        supported = ", ".join(release.name(lv) for lv in range(release.minimum_bootstrap,
                                                               release.latest_production + 1))
        raise CommandError(f"Unsupported metadata.version {text}. Supported metadata.version "
                           f"are {supported}") from None
    if release.line in ("4.0", "4.1"):
        supported = ", ".join(v.name for v in release.versions if v.level <= release.latest_production)
        raise CommandError(f"Unknown metadata.version {text}. Supported metadata.version are {supported}") from None
    supported = ", ".join(v.name for v in release.versions)
    raise CommandError(f"Unknown metadata.version '{text}'. Supported metadata.version are: {supported}") from None


def _level_updates(metadata: str | None, features: list[str], release: versions.Release | None = None, *,
                   from_release_version: bool = False) -> dict[str, int]:
    release = release or versions.release()
    updates: dict[str, int] = {}
    if metadata is not None:
        level = updates[versions.FEATURE_NAME] = parse_metadata_version(metadata, release)
        if from_release_version and not release.is_3x:
            for name in release.production_features:
                updates[name] = release.default_level(name, level)
    for item in features:
        name, level = parse_name_and_level(item)
        if name in updates:
            raise CommandError(f"Feature {name} was specified more than once.")
        updates[name] = level
    return updates


def _disable_updates(features: list[str]) -> dict[str, int]:
    updates: dict[str, int] = {}
    for name in features:
        if name in updates:
            raise CommandError(f"Feature {name} was specified more than once.")
        updates[name] = 0
    return updates


# ----- talking to the controller --------------------------------------------------------------

async def _on_any(addresses: list[tuple[str, int]], action: Callable[[KafkaClient], Awaitable[T]]) -> T:
    return await tool_client.on_any(addresses, action, "kraftsim-features")


def level_to_string(feature: str, level: int, release: versions.Release | None = None) -> str:
    """FeatureCommand.levelToString: metadata.version levels by name, others as numbers."""
    release = release or versions.release()
    if feature == versions.FEATURE_NAME:
        return release.name(level) if release.is_known(level) else f"UNKNOWN {level}"
    return str(level)


def format_describe(resp: ApiVersionsResponse, release: versions.Release | None = None) -> list[str]:
    """One line per *supported* feature, sorted by name, exactly as FeatureCommand prints: its
    fields tab-separated, from 4.3 in padded columns."""
    release = release or versions.release()
    padded = not release.is_3x and release.line not in ("4.0", "4.1", "4.2")
    finalized = {f.name: f.max_version_level for f in getattr(resp, "finalized_features", None) or []}
    epoch = getattr(resp, "finalized_features_epoch", -1)
    epoch_text = str(epoch) if epoch is not None and epoch >= 0 else "-"
    lines = []
    for f in sorted(getattr(resp, "supported_features", None) or [], key=lambda f: f.name):
        lo, hi = level_to_string(f.name, f.min_version, release), level_to_string(f.name, f.max_version, release)
        fin = level_to_string(f.name, finalized.get(f.name, 0), release)
        if padded:
            lines.append(f"Feature: {f.name:<40}  SupportedMinVersion: {lo:<15}  SupportedMaxVersion: {hi:<15}  "
                         f"FinalizedVersionLevel: {fin:<15}  Epoch: {epoch_text}")
        else:
            lines.append(f"Feature: {f.name}\tSupportedMinVersion: {lo}\tSupportedMaxVersion: {hi}\t"
                         f"FinalizedVersionLevel: {fin}\tEpoch: {epoch_text}")
    return lines


def supported_of(resp: ApiVersionsResponse) -> dict[str, tuple[int, int]]:
    return {f.name: (f.min_version, f.max_version) for f in getattr(resp, "supported_features", None) or []}


async def describe(client: KafkaClient, release: versions.Release | None = None) -> list[str]:
    """ApiVersions at v4 (the client's ``negotiate``) carries both supported and finalized
    features; that is all the admin client's describeFeatures reads."""
    resp = await asyncio.wait_for(client.negotiate(), REQUEST_TIMEOUT_S)
    if resp.error_code != 0:
        raise CommandError(_error_text(resp.error_code, None))
    return format_describe(resp, release or versions.release_advertising(supported_of(resp)))


Outcome = dict[str, str | None]
"""Per feature: None on success, else the error text the admin client's exception carries."""


async def update_features(client: KafkaClient, updates_for: Callable[[versions.Release], dict[str, int]],
                          upgrade_type: int, dry_run: bool,
                          release: versions.Release | None = None) -> tuple[dict[str, int], Outcome]:
    """One UpdateFeatures request at the highest version both sides speak, with the updates
    ``updates_for`` gives for the release (``release``, else the controller's)."""
    hello = await asyncio.wait_for(client.negotiate(), REQUEST_TIMEOUT_S)
    release = release or versions.release_advertising(supported_of(hello))
    client.speaks = release.apis  # the tool of that release
    updates = updates_for(release)
    req_cls = messages.UpdateFeaturesRequest  # compiled here, when first needed
    if UPDATE_FEATURES not in client.versions:
        raise CommandError("The controller does not support UpdateFeatures.")
    try:
        version = client.pick_version(UPDATE_FEATURES, req_cls)
    except ValueError as e:
        raise CommandError(str(e)) from None
    if version == 0 and (dry_run or upgrade_type == UNSAFE_DOWNGRADE):
        # v0 has neither ValidateOnly nor UpgradeType: Kafka's client refuses to send them too.
        raise CommandError("The controller only supports UpdateFeatures v0, which cannot express "
                            + ("--dry-run" if dry_run else "--unsafe"))
    # Each version carries only its own field (the codec refuses a non-default value in a
    # version without it): v0 AllowDowngrade, v1+ UpgradeType.
    if version == 0:
        keys = [req_cls.FeatureUpdateKey(feature=name, max_version_level=level,
                                         allow_downgrade=upgrade_type != UPGRADE)
                for name, level in updates.items()]
    else:
        keys = [req_cls.FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=upgrade_type)
                for name, level in updates.items()]
    req = req_cls(timeout_ms=REQUEST_TIMEOUT_MS, feature_updates=keys, validate_only=dry_run)
    resp = await client.request(req, version, timeout=REQUEST_TIMEOUT_S)
    top = resp.error_code
    if top == ErrorCode.NOT_CONTROLLER:
        raise tool_client.NotController(_error_text(top, resp.error_message))
    if top != 0:
        text = _error_text(top, resp.error_message)
        return updates, {name: text for name in updates}
    if version >= 2:  # no per-feature results: the top-level answer is every feature's
        return updates, dict.fromkeys(updates)
    outcome: Outcome = {}
    for r in getattr(resp, "results", None) or []:
        if r.feature in updates:
            outcome[r.feature] = None if r.error_code == 0 else _error_text(r.error_code, r.error_message)
    for name in updates:
        if name not in outcome:
            outcome[name] = f"The controller response did not contain a result for feature {name}"
    return updates, outcome


def _error_text(code: int, message: str | None) -> str:
    """Errors.exception(message): the server's message, else the code's default message."""
    if message is not None:
        return message
    generic = generic_message(code)
    if generic is not None:
        return generic
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def format_outcome(op: str, updates: dict[str, int], outcome: Outcome, dry_run: bool) -> list[str]:
    """FeatureCommand.update's lines, sorted by feature name."""
    lines = []
    for name in sorted(outcome):
        err = outcome[name]
        level = updates[name]
        if err is not None:
            helper = "Can not " if dry_run else "Could not "
            suffix = f"disable {name}" if op == "disable" else f"{op} {name} to {level}"
            lines.append(f"{helper}{suffix}. {err}")
        else:
            verb = " can be " if dry_run else " was "
            obj = "disabled." if op == "disable" else f"{op}d to {level}."
            lines.append(f"{name}{verb}{obj}")
    return lines


def _print_outcome(op: str, updates: dict[str, int], outcome: Outcome, dry_run: bool) -> int:
    for line in format_outcome(op, updates, outcome, dry_run):
        print(line)
    failures = sum(1 for err in outcome.values() if err is not None)
    if failures:
        print(f"{failures} out of {len(updates)} operation(s) failed.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
