"""``kraftsim controller`` on a disk that fails on cue: a whole controller process whose writes
or fsyncs fail once a trigger file exists, for the tests that need the process itself (its exit
status, its one line, what its clients receive before it exits).

    python -m tests.faulty_controller TRIGGER CALL ERRNO CONFIG

From the moment the file TRIGGER exists, every ``fileio.CALL`` (``write`` or ``fsync``: the
system calls through which everything in the metadata directory is written) fails with
OSError(ERRNO); before that the disk works. The rest is the ``kraftsim`` console script.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kraftsim.cli.main import main
from kraftsim.metadata import fileio


def failing(call: Callable[..., Any], trigger: Path, err: int) -> Callable[..., Any]:
    def fail(*args: Any) -> Any:
        if trigger.exists():
            raise OSError(err, os.strerror(err))
        return call(*args)
    return fail


if __name__ == "__main__":
    trigger, call, err, config = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    assert call in ("write", "fsync"), call
    setattr(fileio, call, failing(getattr(fileio, call), trigger, err))
    sys.exit(main(["controller", config]))
