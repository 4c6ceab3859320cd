"""The migration's ZooKeeper session (kazoo), with Kafka's fenced writes.

Blocking calls, run from the runner in a worker thread. The writes are Kafka's:
``claim_controller`` is tryRegisterKRaftControllerAsActiveController (one multi-op bumping
/controller_epoch on its zkVersion and replacing /controller), and /migration is created once
and then only set on its last known zkVersion (-1: unconditionally, which Kafka does once right
after the claim to learn the current zkVersion).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from kraftsim.migration import zk_layout as L

log = logging.getLogger("kraftsim.migration")
MULTI_READ_OPS: Final = 1000  # znodes per multiRead request: each answer is read whole, so bounded
MULTI_READ: Final = 22  # ZooDefs.OpCode.multiRead (ZooKeeper 3.6+)
GET_DATA: Final = 4  # ZooDefs.OpCode.getData
ERROR: Final = -1  # ZooDefs.OpCode.error: an op's failure in a multi's answer
NO_NODE: Final = -101  # KeeperException.Code.NONODE
_HEADER = struct.Struct(">i?i")  # MultiHeader: type, done, err
_INT = struct.Struct(">i")
_STAT = struct.Struct(">qqqqiiiqiiq")  # Stat: czxid, mzxid, ctime, mtime, version, ...
_END = _HEADER.pack(-1, True, -1)


class ZooKeeperUnavailableError(Exception):
    """kazoo is missing, or ZooKeeper cannot be reached."""


class ControllerMovedError(Exception):
    """/controller holds a KRaft epoch at least ours: another KRaft controller took over."""


class ClaimFailedError(Exception):
    """The claim lost a race (BADVERSION, NONODE or NODEEXISTS): retried on the next poll."""


class MigrationFencedError(Exception):
    """/migration changed under us: another KRaft controller is writing."""


def _kazoo() -> Any:
    try:
        import kazoo.client  # noqa: F401
        import kazoo.exceptions  # noqa: F401
        import kazoo.retry  # noqa: F401
    except ImportError as e:
        raise ZooKeeperUnavailableError("the ZooKeeper migration needs kazoo (pip install 'kraftsim[zk]')") from e
    import kazoo

    return kazoo


class MultiRead:
    """ZooKeeper's multiRead (ZooKeeper 3.6+): many getData in one request and one answer, each
    op answered on its own (a missing znode fails only its op, nothing is atomic). kazoo has no
    call for it, but its connection sends any request with ``type``, ``serialize`` and
    ``deserialize``, on the session's xid sequence like its own. One request per thousand
    znodes instead of one each is what makes the copy's reads cheap: kazoo's I/O thread spends
    about a hundred microseconds of Python on each request it sends and answer it reads (a
    fresh selector for each of its selects), which made it the copy's bottleneck."""

    type = MULTI_READ
    watcher = None  # kazoo looks for a watch to register on every answer

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __repr__(self) -> str:  # kazoo's debug log names each request
        return f"MultiRead({len(self.paths)} znodes)"

    def serialize(self) -> bytes:
        op = _HEADER.pack(GET_DATA, False, -1)
        parts: list[bytes] = []
        for p in self.paths:
            path = p.encode()
            parts += (op, _INT.pack(len(path)), path, b"\0")  # GetDataRequest: path, watch=false
        parts.append(_END)
        return b"".join(parts)

    @staticmethod
    def deserialize(buf: bytes | bytearray | memoryview, offset: int) -> list[tuple[bytes, int] | int]:
        """Per op (data, zkVersion), or the op's error code."""
        out: list[tuple[bytes, int] | int] = []
        header, length, stat = _HEADER.unpack_from, _INT.unpack_from, _STAT.unpack_from
        while True:
            kind, done, _ = header(buf, offset)
            offset += 9
            if done:
                return out
            if kind == ERROR:
                out.append(length(buf, offset)[0])
                offset += 4
                continue
            n = length(buf, offset)[0]
            offset += 4
            data = bytes(buf[offset:offset + n]) if n > 0 else b""
            offset += max(n, 0)
            out.append((data, stat(buf, offset)[4]))
            offset += 68


class ZkSession:
    """One kazoo client. Also a ``zk_copy.ZkReader``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._errors = _kazoo().exceptions
        self._multi_read = True  # until the server says it has no multiRead (before ZooKeeper 3.6)

    @staticmethod
    def connect(hosts: str, timeout_ms: int, session_timeout_ms: int = 18000) -> ZkSession:
        kazoo = _kazoo()
        client = kazoo.client.KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000)
        try:
            client.start(timeout=timeout_ms / 1000)
        except Exception as e:  # noqa: BLE001 - kazoo's timeout or a resolver error: one message
            client.close()
            raise ZooKeeperUnavailableError(f"cannot connect to ZooKeeper at {hosts}: {e}") from e
        return ZkSession(client)

    @staticmethod
    async def connect_async(hosts: str, timeout_ms: int, session_timeout_ms: int = 18000) -> ZkSession:
        """As ``connect``, but cancellable: the thread waits in short slices, so a controller
        that stops while ZooKeeper is unreachable is not held up for the whole timeout."""
        import asyncio
        import time

        kazoo = _kazoo()
        client = kazoo.client.KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000)
        deadline = time.monotonic() + timeout_ms / 1000
        try:
            live = client.start_async()
            while not await asyncio.to_thread(live.wait, 0.2):
                if time.monotonic() > deadline:
                    raise ZooKeeperUnavailableError(f"cannot connect to ZooKeeper at {hosts} within {timeout_ms} ms")
        except BaseException:
            client.stop()
            client.close()
            raise
        return ZkSession(client)

    def close(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()

    async def close_async(self) -> None:
        """``close`` on a thread of its own, awaited. A cancelled wait must not cancel the close:
        with ``asyncio.to_thread``, a cancellation that came before a pool thread took the job up
        dropped the job, and the client, never stopped, retried its connection for ever (seen
        when a controller stopped right after its migration driver, under load)."""
        import asyncio
        import threading

        closing = threading.Thread(target=self.close, name="kraftsim-zk-close")
        closing.start()
        await asyncio.to_thread(closing.join)

    # ---- reads --------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self.client.get(path)
        except self._errors.NoNodeError:
            return None
        return (data or b""), stat.version

    def get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """Many reads at once: multiRead requests when the server has them, else pipelined
        reads. A server before ZooKeeper 3.6 answers multiRead UNIMPLEMENTED and closes the
        connection (not the session, which kazoo resumes): the reads then fall back for good."""
        return self.send_many(paths)()

    def send_many(self, paths: list[str]) -> Callable[[], list[tuple[bytes, int] | None]]:
        """``get_many`` in two steps: the requests are sent now, and the function returned
        waits for their answers. What the caller does in between overlaps with ZooKeeper's
        work on them (the copy decodes one round of partition states while the next is read)."""
        if not self._multi_read:
            return lambda: self._pipelined_get(paths)
        client = self.client
        root = client.chroot or ""
        pending = []
        for start in range(0, len(paths), MULTI_READ_OPS):
            answer = client.handler.async_result()
            client._call(MultiRead([root + p for p in paths[start:start + MULTI_READ_OPS]]), answer)
            pending.append(answer)
        return lambda: self._multi_answers(paths, pending)

    def _multi_answers(self, paths: list[str], pending: list[Any]) -> list[tuple[bytes, int] | None]:
        """The answers of the multiRead requests ``send_many`` sent, in order."""
        out: list[tuple[bytes, int] | None] = []
        errors = self._errors.EXCEPTIONS
        try:
            for answer in pending:
                for got in answer.get():
                    if got.__class__ is tuple:
                        out.append(got)
                    elif got == NO_NODE:
                        out.append(None)
                    else:
                        raise errors[got]()
        except self._errors.KazooException as e:
            # UNIMPLEMENTED: no multiRead; then the requests sent with this one fail too, as the
            # server closed the connection on it, and are read again the same way
            if self._multi_read and not isinstance(e, self._errors.UnimplementedError):
                raise
            if self._multi_read:
                log.info("ZooKeeper has no multiRead (before 3.6): reading znodes with pipelined getData")
            self._multi_read = False
            # the server closed the connection: retried while kazoo resumes the session
            retry = _kazoo().retry.KazooRetry(max_tries=10, max_delay=2, sleep_func=self.client.handler.sleep_func)
            return list(retry(self._pipelined_get, paths))
        return out

    def _pipelined_get(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """Pipelined reads on the one session (kazoo's async API): one round trip's wait for the
        lot instead of one per znode."""
        pending = [self.client.get_async(p) for p in paths]
        out: list[tuple[bytes, int] | None] = []
        for result in pending:
            try:
                data, stat = result.get()
            except self._errors.NoNodeError:
                out.append(None)
            else:
                out.append(((data or b""), stat.version))
        return out

    def children(self, path: str) -> list[str]:
        try:
            return list(self.client.get_children(path))
        except self._errors.NoNodeError:
            return []

    # ---- writes -------------------------------------------------------------------------------
    def ensure_paths(self, paths: Iterable[str]) -> None:
        """Kafka's createTopLevelPaths: persistent, empty, created when missing."""
        for path in paths:
            self.client.ensure_path(path)

    def register_ephemeral(self, parent: str, znodes: list[tuple[str, bytes]]) -> int:
        """Create each (path, data) as an ephemeral znode of this session, unless one exists;
        returns how many were created."""
        self.client.ensure_path(parent)
        created = 0
        for path, data in znodes:
            try:
                self.client.create(path, data, ephemeral=True)
                created += 1
            except self._errors.NodeExistsError:
                continue
        return created

    def get_or_create_migration(self) -> tuple[L.MigrationZNode, int]:
        got = self.get(L.MIGRATION)
        if got is not None:
            return L.MigrationZNode.decode(got[0]), got[1]
        initial = L.MigrationZNode()
        try:
            self.client.create(L.MIGRATION, initial.encode())
        except self._errors.NodeExistsError:
            return self.get_or_create_migration()
        return initial, 0

    def set_migration(self, znode: L.MigrationZNode, zk_version: int) -> int:
        """Write /migration on its zkVersion (-1: any); returns the new zkVersion."""
        try:
            stat = self.client.set(L.MIGRATION, znode.encode(), version=zk_version)
        except self._errors.BadVersionError as e:
            raise MigrationFencedError(f"/migration is no longer at zkVersion {zk_version}: another KRaft "
                                       f"controller is writing to ZooKeeper") from e
        return int(stat.version)

    def claim_controller(self, kraft_id: int, kraft_epoch: int, now_ms: int) -> tuple[int, int]:
        """Become ZooKeeper's controller; returns (the new ZK controller epoch, its zkVersion)."""
        current = self.get(L.CONTROLLER)
        if current is not None:
            registered = L.ControllerZNode.decode(current[0])
            if registered.kraft_controller_epoch >= 0 and registered.kraft_controller_epoch >= kraft_epoch:
                raise ControllerMovedError(
                    f"Cannot register KRaft controller {kraft_id} with epoch {kraft_epoch} as the current "
                    f"controller register in ZK has the same or newer epoch {registered.kraft_controller_epoch}.")
        epoch = self.get(L.CONTROLLER_EPOCH)
        if epoch is None:
            raise ClaimFailedError(f"Cannot register KRaft controller {kraft_id} as the active controller since "
                                   f"there is no ZK controller epoch present.")
        new_epoch = L.decode_controller_epoch(epoch[0]) + 1
        txn = self.client.transaction()
        txn.set_data(L.CONTROLLER_EPOCH, L.encode_controller_epoch(new_epoch), version=epoch[1])
        if current is not None:
            txn.delete(L.CONTROLLER, version=current[1])
        txn.create(L.CONTROLLER, L.ControllerZNode(kraft_id, now_ms, kraft_epoch).encode())
        results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)
                    and not isinstance(r, self._errors.RolledBackError)]
        if failures:
            raise ClaimFailedError(f"{type(failures[0]).__name__} while trying to register KRaft controller "
                                   f"{kraft_id} with ZK epoch {new_epoch}")
        return new_epoch, int(results[0].version)

    # ---- dual-write: Kafka's retryMigrationRequestsUntilConnected ---------------------------------
    def fenced_write(self, ops: list[ZkOp], migration: L.MigrationZNode, migration_zk_version: int,
                     controller_epoch_zk_version: int) -> int:
        """One multi-op: check /controller_epoch's zkVersion, set /migration on its zkVersion (with
        the offset this write brings ZooKeeper up to), then ``ops``. Returns /migration's new
        zkVersion. A moved /controller_epoch or /migration means another controller owns
        ZooKeeper (ControllerMovedError, MigrationFencedError); any other failure is a
        ZkWriteError, retried by the runner."""
        txn = self.client.transaction()
        txn.check(L.CONTROLLER_EPOCH, version=controller_epoch_zk_version)
        txn.set_data(L.MIGRATION, migration.encode(), version=migration_zk_version)
        for op in ops:
            if op.kind == "create":
                txn.create(op.path, op.data)
            elif op.kind == "set":
                txn.set_data(op.path, op.data or b"", version=-1)
            else:
                txn.delete(op.path, version=-1)
        results = txn.commit()
        errors = self._errors
        if isinstance(results[0], errors.BadVersionError | errors.NoNodeError):
            raise ControllerMovedError(f"/controller_epoch is no longer at zkVersion {controller_epoch_zk_version}: "
                                       f"another controller owns ZooKeeper")
        if isinstance(results[1], errors.BadVersionError | errors.NoNodeError):
            raise MigrationFencedError(f"/migration is no longer at zkVersion {migration_zk_version}: another KRaft "
                                       f"controller is writing to ZooKeeper")
        failures = [(op.path, r) for op, r in zip(ops, results[2:], strict=False)
                    if isinstance(r, Exception) and not isinstance(r, errors.RolledBackError)]
        if failures:
            path, err = failures[0]
            raise ZkWriteError(f"{type(err).__name__} on {path}: the ZooKeeper write was not applied")
        return int(results[1].version)

    def notify(self, notifications: list[tuple[str, bytes]]) -> None:
        """Change notifications (sequential znodes) for ZooKeeper-mode brokers: written after
        the fenced multi and outside it, as Kafka writes them."""
        for prefix, data in notifications:
            self.client.create(prefix, data, sequence=True, makepath=True)

    def subtree(self, path: str) -> list[str]:
        """Every znode below ``path``, children before their parents (an order a multi can delete)."""
        out: list[str] = []
        for child in self.children(path):
            out.extend(self.subtree(f"{path}/{child}"))
            out.append(f"{path}/{child}")
        return out


class ZkWriteError(Exception):
    """A dual-write multi-op failed on one of its own znodes (not fenced): retried."""


@dataclass(frozen=True)
class ZkOp:
    """One operation of a fenced multi: create, set (any version) or delete (any version)."""
    kind: str
    path: str
    data: bytes | None = None
