"""One owner per log directory: the ``.lock`` file Kafka locks in every directory it writes.

Kafka's ``FileLock`` takes ``FileChannel.tryLock()`` on ``<dir>/.lock``, which on Linux is a
POSIX record lock (``fcntl(F_SETLK)``) over the whole file. kraftsim takes the same lock
(``fcntl.lockf``), so a kraftsim process and a Kafka process (a controller, a broker, the
metadata shell) refuse each other's directories as two Kafka processes do. Every kraftsim
command that writes a metadata or log directory takes it before it reads or writes anything
there, and holds it until it is done; the kernel drops it when the process ends, kill -9
included. Readers (``kraftsim dump-log``, the Spark source) take no lock, as Kafka's
DumpLogSegments takes none.

POSIX locks belong to the process, not to the file descriptor: a second ``lockf`` from the same
process would succeed, and closing *any* descriptor of the file would drop the lock. So the
directories this process holds are registered here, a second acquisition in the process is
refused before the file is opened again (Java refuses it too, with
OverlappingFileLockException), and nothing in kraftsim opens ``.lock`` except this module.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from pathlib import Path

from kraftsim.metadata.files import StorageError

LOCK_FILE = ".lock"  # Kafka's LogManager.LockFileName

# The directories locked by this process: (st_dev, st_ino) of the directory -> its lock.
_held: dict[tuple[int, int], DirectoryLock] = {}
_registry = threading.Lock()


class DirectoryLockedError(StorageError):
    """Another process (or another owner in this one) holds the directory's lock."""

    def __init__(self, directory: Path, holder: int | None) -> None:
        self.directory, self.holder = directory, holder
        if holder == os.getpid():
            who = "another controller or command in this process is using this directory"
        else:
            who = ("another process is using this directory (a kraftsim or Kafka controller, a broker, or "
                   "a kraftsim command)" + (f"; process {holder} holds the lock" if holder else ""))
        super().__init__(f"Failed to acquire lock on file {LOCK_FILE} in {directory}: {who}.")


class DirectoryLock:
    """The lock on one directory, held until :meth:`release` or the end of the process."""

    __slots__ = ("directory", "_fd", "_key")

    def __init__(self, directory: Path, fd: int, key: tuple[int, int]) -> None:
        self.directory = directory
        self._fd: int | None = fd
        self._key = key

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Remove ``.lock`` and unlock, as Kafka's ``FileLock.destroy`` does at a clean stop.
        The file is unlinked while still locked, so that a process that opens the path after
        this sees a new file; one that opened the old file before and locks it after finds
        (see :func:`lock_directory`) that it no longer is the directory's ``.lock``."""
        fd = self._fd
        if fd is None:
            return
        self._fd = None
        try:
            if _same_file(fd, self.directory / LOCK_FILE):
                os.unlink(self.directory / LOCK_FILE)
        except OSError:
            pass  # a directory gone or read-only: the lock still ends with the descriptor
        finally:
            os.close(fd)
            with _registry:
                if _held.get(self._key) is self:
                    del _held[self._key]

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"DirectoryLock({str(self.directory)!r}, held={self.held})"


def lock_directory(directory: Path) -> DirectoryLock:
    """Lock an existing directory for this process, or raise :class:`DirectoryLockedError`.

    ``.lock`` is created if missing (Kafka's FileLock creates it too). Any other failure (the
    directory missing or not writable) is the OSError of the step that failed."""
    st = os.stat(directory)
    key = (st.st_dev, st.st_ino)
    path = directory / LOCK_FILE
    with _registry:
        if key in _held:
            raise DirectoryLockedError(directory, os.getpid())
        for _ in range(100):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _holder(fd)
                os.close(fd)
                if e.errno in (errno.EACCES, errno.EAGAIN):
                    raise DirectoryLockedError(directory, holder) from None
                raise OSError(e.errno, e.strerror, str(path)) from e
            if _same_file(fd, path):
                lock = _held[key] = DirectoryLock(directory, fd, key)
                return lock
            # The holder released it (unlinking the file) between our open and our lock: the
            # file we locked is no longer the directory's; try the one there now.
            os.close(fd)
    raise DirectoryLockedError(directory, None)


def lock_directories(directories: list[Path], held: list[DirectoryLock] | None = None) -> list[DirectoryLock]:
    """Lock every directory (each once, skipping those ``held`` already), or none: on a refusal
    the ones taken here are released."""
    locks: list[DirectoryLock] = []
    seen = {lock._key for lock in held or [] if lock.held}
    try:
        for d in directories:
            st = os.stat(d)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            locks.append(lock_directory(d))
    except BaseException:
        release_all(locks)
        raise
    return locks


def release_all(locks: list[DirectoryLock]) -> None:
    for lock in reversed(locks):
        lock.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


# struct flock on Linux: l_type, l_whence (short), l_start, l_len (off_t, 64-bit), l_pid (int).
_FLOCK = struct.Struct("@hhqqi")


def _holder(fd: int) -> int | None:
    """The process holding a conflicting lock (F_GETLK), for the error message; None where the
    kernel does not say (another host over NFS) or the query is not supported."""
    try:
        query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
    except (OSError, struct.error, AttributeError):
        return None
    return pid if l_type != fcntl.F_UNLCK and pid > 0 else None
