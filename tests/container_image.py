"""The container image built and run without a docker engine: for tests/test_docker_image.py,
and for ``make image`` / ``make image-base`` on a machine without one.

Building takes podman, as root, with ``--isolation chroot``: the Dockerfile's RUN steps run in a
chroot, so no daemon and no OCI runtime is involved. Where no container registry is reachable,
the base is made from Debian's packages (mmdebstrap: bookworm's minbase with python3, its venv
module and ``python``, what the Dockerfile uses of python:3.11-slim-bookworm) and imported.
pip in the build installs only from wheels downloaded beforehand by this machine's own pip
(the ``wheels`` build context, ``PIP_NO_INDEX``): that pip reaches PyPI the way the machine is
set up to (its proxy, its certificate authorities), which a step inside the image cannot. The
base tarball and the wheels are cached under ``.cache/image/``, named by a hash of what made
them, so a second run fetches nothing.

Running takes two changes to ``podman run``'s defaults on these machines: the runtime (RUNTIME:
crun, podman's default, refuses their hybrid cgroup v1/v2 hierarchy with "cgroups in hybrid mode
not supported", and runc does not), and the container's rlimits (:func:`run_options`: within this
process's hard limits, because root here lacks CAP_SYS_RESOURCE and podman's defaults are above
them: "setrlimit `RLIMIT_NOFILE`: Operation not permitted").

    python -m tests.container_image base             make and import the Debian base; print its name
    python -m tests.container_image build -t TAG ... [--base IMAGE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "image"

# The base: what python:3.11-slim-bookworm gives the Dockerfile (Debian bookworm, CPython 3.11
# as `python` with its venv module), from Debian's own packages.
SUITE = "bookworm"
PYTHON_VERSION = "3.11"
GLIBC = (2, 36)  # bookworm's: the newest manylinux wheels its Python can load
MIRRORS = (
    f"deb http://deb.debian.org/debian {SUITE} main",
    f"deb http://deb.debian.org/debian {SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {SUITE}-security main",
)
PACKAGES = ("python3", "python3-venv", "python-is-python3")
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    # merged /usr set up by mmdebstrap itself, rather than by the usrmerge package (and the perl
    # it pulls in)
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    # no manuals, translations or documentation but the licences, as Debian's slim images
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-include=/usr/share/locale/locale.alias",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
)
# What `podman import` writes into the base's config (a tarball has none): python:*-slim's.
BASE_CONFIG = ("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV LANG=C.UTF-8")
BASE_NAME = f"localhost/kraftsim-base:{SUITE}"

# The tests' images live in a containers storage of their own, one per checkout: they touch no
# image of the machine's, and leftovers of earlier builds can be pruned without asking whose
# they are. Outside .cache/: layers are not files to carry between machines.
TEST_STORE = Path("/var/tmp/kraftsim-image") / hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]

# Each program the build or the run needs, and the Debian package that has it
# (.ci/install-system-deps installs them).
TOOLS = {"podman": "podman", "mmdebstrap": "mmdebstrap", "runc": "runc", "iptables": "iptables"}
# The OCI runtime podman's containers need here: crun refuses a hybrid cgroup v1/v2 hierarchy.
RUNTIME = "runc"


class Unavailable(Exception):
    """The image cannot be built or run on this machine; the message says why (the skip reason)."""


def why_unavailable() -> str | None:
    """Why this machine cannot build and run the image at all (None: it can). Missing programs
    are not a reason: as root, .ci/install-system-deps installs them, and a test that finds them
    missing fails saying so."""
    if os.geteuid() != 0:
        return "building and running the image needs root (podman build --isolation chroot, podman run)"
    return None


def check_tools(*tools: str) -> None:
    """Fail, naming the Debian packages, if any of ``tools`` (default: all of TOOLS) is missing."""
    missing = sorted({TOOLS[t] for t in tools or TOOLS if shutil.which(t) is None})
    if missing:
        raise RuntimeError(f"missing Debian packages {', '.join(missing)}: run .ci/install-system-deps as root")


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:12]


def _fetch(name: str, argv: Sequence[str], what: str, url: str, timeout: float) -> None:
    """Run ``argv`` (``name``), which fetches ``what`` from ``url``'s server. If it fails and the
    server does not answer either, this machine has no network: Unavailable (a skip), not a
    failure."""
    try:
        _run(argv, name, timeout)
    except RuntimeError as failed:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=20):
                pass
        except urllib.error.HTTPError:
            pass  # it answers
        except (urllib.error.URLError, OSError) as e:
            raise Unavailable(f"no network: {url} does not answer ({getattr(e, 'reason', e)}), and {what} "
                              f"are not cached in {CACHE}") from failed
        raise


def _run(argv: Sequence[str], what: str, timeout: float) -> str:
    try:
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{what}: no result within {timeout}s") from e
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-4000:]}")
    return str(r.stdout)


@dataclass(frozen=True)
class Podman:
    """podman on one containers storage: ``store`` (its graph root and run root beneath), or the
    machine's own when None; ``runtime`` the OCI runtime its containers run with (None: its
    default)."""

    store: Path | None = None
    runtime: str | None = None

    def argv(self, *args: str) -> list[str]:
        argv = [shutil.which("podman") or "podman"]
        if self.store is not None:
            argv += ["--root", str(self.store / "root"), "--runroot", str(self.store / "run")]
        if self.runtime is not None:
            argv += ["--runtime", self.runtime]
        return [*argv, *args]

    def __call__(self, *args: str, timeout: float = 120) -> str:
        return _run(self.argv(*args), f"podman {args[0]}", timeout).strip()

    def exists(self, image: str) -> bool:
        return subprocess.run(self.argv("image", "exists", image), capture_output=True, timeout=60).returncode == 0


def run_options() -> list[str]:
    """``podman run`` options for these machines: the container's rlimits within what root may
    set here without CAP_SYS_RESOURCE, namely the hard limits this process has, the process count
    at most kernel.pid_max (podman lowers its own hard limit to it, and the runtime inherits that)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    if nofile == resource.RLIM_INFINITY:
        nofile = 1 << 20
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


# -- the base ------------------------------------------------------------------------------------

def _mmdebstrap_args() -> list[str]:
    return [*MMDEBSTRAP_OPTIONS, f"--include={','.join(PACKAGES)}"]


def base_tarball() -> Path:
    """The base's root filesystem as a tarball, made by mmdebstrap once and cached."""
    args = _mmdebstrap_args()
    out = CACHE / f"debian-{SUITE}-{_key(SUITE, args, MIRRORS, platform.machine())}.tar"
    if out.is_file():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    # Renamed when complete, so a run cut short is made again. mmdebstrap picks its output's
    # format by the name's ending: .tar.
    partial = out.with_name(f"{out.stem}.{os.getpid()}.partial.tar")
    try:
        _fetch("mmdebstrap", ["mmdebstrap", "--quiet", *args, SUITE, str(partial), *MIRRORS],
               "the base's Debian packages", MIRRORS[0].split()[1] + f"/dists/{SUITE}/InRelease", timeout=900)
        partial.rename(out)
    finally:
        partial.unlink(missing_ok=True)
    for old in CACHE.glob(f"debian-{SUITE}-*.tar"):
        if old != out and re.fullmatch(rf"debian-{SUITE}-[0-9a-f]{{12}}\.tar", old.name):
            old.unlink()
    return out


def base_image(podman: Podman) -> str:
    """The Debian base, imported into ``podman``'s storage if it is not there; its name, which
    says which tarball it came from. It is also tagged BASE_NAME."""
    tarball = base_tarball()
    name = f"{BASE_NAME}-{tarball.stem.rsplit('-', 1)[1]}"
    if not podman.exists(name):
        changes = [a for c in BASE_CONFIG for a in ("--change", c)]
        podman("import", "--quiet", *changes, str(tarball), name, timeout=300)
    podman("tag", name, BASE_NAME)
    return name


# -- the wheels ----------------------------------------------------------------------------------

def requirements() -> list[str]:
    """What pip installs in the Dockerfile's build stage: the build system, the dependencies,
    and those of the extras its ``pip install '.[...]'`` names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    m = re.search(r"pip install '\.\[([\w,]+)\]'", (ROOT / "Dockerfile").read_text())
    if m is None:
        raise RuntimeError("the Dockerfile's pip install '.[extras]' not found: update tests/container_image.py")
    reqs = [*project["build-system"]["requires"], *project["project"]["dependencies"]]
    for extra in m.group(1).split(","):
        reqs += project["project"]["optional-dependencies"][extra]
    return reqs


def _platform_tags() -> list[str]:
    """The manylinux tags the base's Python accepts: glibc 2.5 up to bookworm's, on this machine's
    architecture (the base is made for it), with the legacy aliases."""
    arch = platform.machine()
    tags = [f"manylinux_{GLIBC[0]}_{minor}_{arch}" for minor in range(GLIBC[1], 4, -1)]
    tags += [f"manylinux2014_{arch}"]
    if arch in ("x86_64", "i686"):
        tags += [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    return tags


def wheels() -> Path:
    """A directory of wheels for every requirement, for the base's Python, downloaded once by
    this interpreter's pip and cached."""
    reqs = requirements()
    options = ["--only-binary=:all:", "--implementation", "cp", "--python-version", PYTHON_VERSION,
               "--abi", f"cp{PYTHON_VERSION.replace('.', '')}"]
    for tag in _platform_tags():
        options += ["--platform", tag]
    out = CACHE / f"wheels-{_key(reqs, options)}"
    if (out / ".complete").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", str(out)]
    _fetch("pip download", [*pip, *options, *reqs], "the image's Python packages", "https://pypi.org/simple/pip/",
           timeout=600)
    (out / ".complete").write_text("\n".join(reqs) + "\n")
    for old in CACHE.glob("wheels-*"):
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    return out


# -- the build -----------------------------------------------------------------------------------

def build(podman: Podman, tags: Sequence[str], base: str | None = None, timeout: float = 900) -> str:
    """podman build of the Dockerfile, on ``base`` (None: the Debian base) with the cached wheels;
    the image id. Earlier builds' leftover layers in a test store are pruned first (those of the
    last two hours are kept: the compiled-build pass of ``make test`` builds the same sources
    again, from them)."""
    check_tools("podman", *(() if base else ("mmdebstrap",)))
    base = base or base_image(podman)
    if podman.store is not None:
        podman("image", "prune", "--force", "--filter", "until=2h", timeout=300)
    iidfile = CACHE / f"build-{os.getpid()}.iid"
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        _run(podman.argv(
            "build", "--isolation", "chroot",
            "--format", "docker",  # the OCI format has no HEALTHCHECK: podman would drop it
            "--pull=never" if base.startswith("localhost/") else "--pull=missing",
            "--layers", "--iidfile", str(iidfile),
            "--build-arg", f"PYTHON_IMAGE={base}",
            "--build-context", f"wheels={wheels()}",
            "--build-arg", "PIP_NO_INDEX=1", "--build-arg", "PIP_FIND_LINKS=/wheels",
            *[a for t in tags for a in ("--tag", t)], str(ROOT)), "podman build", timeout=timeout)
        return iidfile.read_text().strip()
    finally:
        iidfile.unlink(missing_ok=True)


# -- command line (make image, make image-base) --------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.container_image", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("base", help=f"make the Debian base and import it as {BASE_NAME}")
    b = sub.add_parser("build", help="podman build the image with wheels downloaded here")
    b.add_argument("-t", "--tag", action="append", required=True)
    b.add_argument("--base", help="the base image (default: the Dockerfile's)")
    args = p.parse_args(argv)
    podman = Podman()  # the machine's own storage: the images are the user's
    try:
        if os.geteuid() != 0:
            raise Unavailable("podman build --isolation chroot needs root")
        if args.command == "base":
            check_tools("podman", "mmdebstrap")
            base_image(podman)
            print(BASE_NAME)
        else:
            base = args.base or _dockerfile_base()
            build(podman, args.tag, base, timeout=3600)
            print(" ".join(args.tag))
    except (Unavailable, RuntimeError) as e:
        print(f"container_image {args.command}: {e}", file=sys.stderr)
        return 1
    return 0


def _dockerfile_base() -> str:
    m = re.search(r"^ARG PYTHON_IMAGE=(\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert m is not None, "the Dockerfile's ARG PYTHON_IMAGE"
    return m.group(1)


if __name__ == "__main__":
    sys.exit(main())
