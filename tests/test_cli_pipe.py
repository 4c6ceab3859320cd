"""A ``kraftsim`` command whose stdout reader went away (``kraftsim dump-log ... | head``) exits
quietly: nothing on stderr, the status a shell shows for a tool SIGPIPE stopped (141).

The reader here is gone before the command writes a byte (the read end of its pipe is closed
before it starts), the case ``head`` reaches once it has its lines, without a race on when
``head`` closes. stdout is a pipe, so block-buffered, as for a user: a short output fails at the
flush when the command ends, a long one in the middle of its writing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import harness


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    try:
        return subprocess.run([str(Path(sys.executable).with_name("kraftsim")), *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, env=env)
    finally:
        os.close(write_end)


def test_short_output_into_a_closed_pipe_exits_quietly() -> None:
    r = _into_closed_pipe("random-uuid")  # one line, written by the flush at the end
    assert (r.returncode, r.stderr) == (141, "")


def test_dump_log_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path)
    harness.format_dir(cfg)
    checkpoint = tmp_path / "data" / "bootstrap.checkpoint"
    r = _into_closed_pipe("dump-log", *[str(checkpoint)] * 40)  # ~48 KB of text: fails mid-write
    assert (r.returncode, r.stderr) == (141, "")
