"""Kafka's command-line tools run in warm JVMs (``ToolServer.java``), a pool per test process.

A fresh JVM costs about a second of CPU before the tool does anything, and the Kafka tests run
hundreds of tools on two cores. A server runs one command at a time; callers on other threads get
servers of their own, started on demand and kept for the next caller. A command the server
cannot run as the shell would (one that reads standard input, needs a working directory, or has
an argument with a newline) runs in a fresh JVM instead, as do the tools of :data:`OWN_JVM`, and so does one whose server died before
it began. A tool that ends the server's JVM (System.exit rather than Kafka's Exit) fails its
test, which names it. A command that outlives its timeout kills its server, as it would have
killed its JVM.
"""

from __future__ import annotations

import atexit
import locale
import os
import select
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

SOURCE = Path(__file__).with_name("ToolServer.java")
RUN = b"--- run\n"
#: Tools that always get a JVM of their own, and why.
OWN_JVM = {
    # Run after run in one JVM, now and then (1 in 7 runs here) its metadata loader never applies
    # the snapshot, and the shell waits in waitUntilCaughtUp for ever; 12 of 12 fresh runs did not.
    "org.apache.kafka.shell.MetadataShell": "its loader at times never catches up in a warm JVM",
}


class ServerDied(Exception):
    """The server's JVM ended before it started the command."""


class ToolServer:
    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.log: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     start_new_session=True)
        self.buffer = bytearray()

    def run(self, args: tuple[str, ...], timeout: float) -> tuple[int, bytes, bytes]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"\0".join(os.fsencode(a) for a in args) + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ServerDied(str(e)) from e
        deadline = time.monotonic() + timeout
        self._read_until(lambda: len(self.buffer) >= len(RUN), deadline, args, timeout)
        assert self.buffer.startswith(RUN), bytes(self.buffer[:200])
        del self.buffer[:len(RUN)]
        try:
            self._read_until(lambda: b"\n" in self.buffer, deadline, args, timeout)
        except ServerDied as e:
            raise AssertionError(f"{args[0]} ended the tool server's JVM (System.exit rather than Kafka's "
                                 f"Exit?); it needs a JVM of its own.\n{e}") from None
        end = self.buffer.index(b"\n")
        _, _, code, out_len, err_len = self.buffer[:end].decode("ascii").split(" ")
        del self.buffer[:end + 1]
        n_out, n_err = int(out_len), int(err_len)
        self._read_until(lambda: len(self.buffer) >= n_out + n_err, deadline, args, timeout)
        out, err = bytes(self.buffer[:n_out]), bytes(self.buffer[n_out:n_out + n_err])
        del self.buffer[:n_out + n_err]
        return int(code), out, err

    def _read_until(self, done: Callable[[], bool], deadline: float, args: tuple[str, ...],
                    timeout: float) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired([*self.command, *args], timeout)
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise ServerDied(self.stderr_tail())
                self.buffer += chunk

    def stderr_tail(self, size: int = 3000) -> str:
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - size))
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        """End of input: the server exits and runs the shutdown hooks the tools added."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self.log.close()


_lock = threading.Lock()
# Idle servers by their command: a server runs the tools of the Kafka version it was started with.
_idle: dict[tuple[str, ...], list[ToolServer]] = {}
_all: list[ToolServer] = []


@atexit.register
def _stop_all() -> None:
    for server in _all:
        server.close()


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` would decode it."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def run(server_command: list[str], args: tuple[str, ...], timeout: float) -> tuple[int, str, str] | None:
    """``args`` (main class, then arguments) in a warm server, started if none is idle with
    ``server_command`` (java, its options and classpath, then :data:`SOURCE`); None where a fresh
    JVM must run it instead."""
    if args[0] in OWN_JVM or any("\n" in a or "\0" in a for a in args):
        return None
    key = tuple(server_command)
    with _lock:
        idle = _idle.get(key)
        server = idle.pop() if idle else None
    if server is None:
        server = ToolServer(server_command)
        with _lock:
            _all.append(server)
    try:
        code, out, err = server.run(args, timeout)
    except BaseException as e:
        # Died before the command began (a fresh JVM runs it), or a timeout, a dead server after
        # the command began, an interrupt: in every case the server's state is unknown.
        server.kill()
        with _lock:
            _all.remove(server)
        if isinstance(e, ServerDied):
            return None
        raise
    with _lock:
        _idle.setdefault(key, []).append(server)
    return code, _text(out), _text(err)
