"""How every commit this package makes is made: idempotent by Delta's ``txn``, tried again on the
table as another writer left it when it loses a race (as Delta's optimistic concurrency does for
blind appends), with ``userMetadata``, and followed by a log checkpoint every tenth version.

delta-rs looks for expired log files to delete (a ``LIST`` of the whole ``_delta_log``, which
grows with every commit until the retention, 30 days by default, lets files go) after every
commit unless told otherwise; here it does so after every tenth version only
(:func:`post_commit`), as Spark does at its log checkpoints: what it deletes is the same, a few
commits later.

On an object store a log checkpoint (every tenth version) costs delta-rs a read of every
commit since the last one, twice, and two puts: 20-odd requests, which it made after the
commit and before the call returned, so the batch waited. There it is written by a thread of
its own (:func:`checkpoint_now_and_then`), after the call returns, with the cleanup of expired
log files; on a local disk, in the commit, as before."""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import zlib
from collections.abc import Callable

from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError

from ..errors import StorageError
from .cache import snapshots, synced
from .stores import calling, local_path

log = logging.getLogger(__name__)

_RETRIES = 20  # commits lost to other writers before giving up
# Tables created here get a log checkpoint every 10 commits, as Spark writes them (delta-rs's
# default is 100): opening a table and checking a txn read the commits since the last
# checkpoint, one request each on S3.
CHECKPOINT_EVERY = 10


def retrying(path: str, current: DeltaTable | None, txn: tuple[str, int] | None, doing: str,
             attempt: Callable[[DeltaTable | None], bool | None]) -> bool | None:
    """``attempt(current)`` (a commit), ``False`` instead when the table has seen ``txn``; a
    commit that loses a race with another writer's is read again and attempted again."""
    for _ in range(_RETRIES):
        if txn is not None and current is not None and has_seen(path, current, txn):
            return False
        try:
            return attempt(current)
        except CommitFailedError as conflict:  # another writer's commit conflicts: read it
            log.debug("%s %s lost a race, retrying: %s", doing, path, conflict)
            current = synced(path, fresh=True)
    raise StorageError(f"{doing} {path} lost {_RETRIES} races with other writers in a row; "
                       "is another run of this pipeline writing the same table?")


def has_seen(path: str, current: DeltaTable, txn: tuple[str, int]) -> bool:
    """Whether ``current`` holds a commit of ``txn``'s app id at its version or a later one.

    delta-rs answers by reading every commit since the table's last log checkpoint (on an
    object store, one request each); once it has, or once this process committed with that
    app id, the answer is kept for the snapshot's version and carried forward by the commits
    this process makes on it (:meth:`Snapshots.committed`), so the next batch's check asks
    nothing of the store. A commit by another writer moves the snapshot past what is known,
    and delta-rs reads the log again."""
    known = snapshots.known(path, current)
    if known is not None and txn[0] in known.txns:
        seen = known.txns[txn[0]]
    else:  # None: never (and 0 is a version like any other)
        seen = calling(path, "reading the transactions of", lambda: current.transaction_version(txn[0]))
        snapshots.learn_txn(path, current, txn[0], seen)
    return seen is not None and seen >= txn[1]


def commit_properties(txn: tuple[str, int] | None, user_metadata: str | None) -> CommitProperties:
    """A commit's ``txn`` action (idempotence) and ``userMetadata``."""
    return CommitProperties(
        app_transactions=[Transaction(app_id=txn[0], version=txn[1])] if txn else None,
        custom_metadata={"userMetadata": user_metadata} if user_metadata is not None else None)


def post_commit(path: str, current: DeltaTable) -> PostCommitHookProperties:
    """What delta-rs does after a commit made on ``current``, in the commit's call. On an
    object store nothing: :func:`checkpoint_now_and_then` has the log checkpoint and the
    cleanup of expired log files done in the background. On a local disk, the log checkpoint
    the table's interval asks for, and the cleanup (as the table's settings say) only when the
    commit's version is a multiple of :data:`CHECKPOINT_EVERY`: else delta-rs lists the whole
    log after every commit. Skipping it changes nothing but when expired files go: the next
    cleanup deletes them."""
    if local_path(path) is None:
        return PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
    cleanup = None if (int(current.version()) + 1) % CHECKPOINT_EVERY == 0 else False
    return PostCommitHookProperties(cleanup_expired_logs=cleanup)


def checkpoint_now_and_then(path: str, current: DeltaTable) -> None:
    """After a commit on ``current``: the log checkpoint due at its version, if one is: every
    ``delta.checkpointInterval`` versions for tables delta-rs made (they carry it), every tenth
    for tables Spark made, as Spark's own commit would (delta-rs's own default is every
    hundredth), so neither reader replays a long log. On a local disk delta-rs writes its
    tables' in the commit (:func:`post_commit`) and Spark's are written here, at multiples of
    ten. On an object store both are handed to a background thread (:func:`settled` waits for
    it), which also cleans up expired log files (unless ``delta.enableExpiredLogCleanup`` is
    false), each table at versions of its own (:func:`_offset`)."""
    version = int(current.version())
    configuration = current.metadata().configuration or {}
    interval = configuration.get("delta.checkpointInterval")
    if local_path(path) is not None:
        if interval is None and version % CHECKPOINT_EVERY == 0:
            _checkpoint(path, current, cleanup=False)
        return
    every = max(int(interval), 1) if interval is not None else CHECKPOINT_EVERY
    if (version + 1 + _offset(path, every)) % every == 0:
        _later(path, current)


def _offset(path: str, every: int) -> int:
    """Where in each run of ``every`` versions the table at ``path`` (on an object store) gets
    its log checkpoint: a run's tables each take a commit per batch, so at the same versions
    they would all be checkpointed in the same batch (20-odd requests each, at once).

    >>> _offset("s3://lake/wh/p/_state", 10) == _offset("s3://lake/wh/p/_state", 10)
    True
    """
    return zlib.crc32(path.encode()) % every


def settled() -> None:
    """Wait until the log checkpoints handed to the background are written (or given up)."""
    _pending.join()


def _checkpoint(path: str, current: DeltaTable, cleanup: bool) -> None:
    version = int(current.version())
    try:
        current.create_checkpoint()
        configuration = current.metadata().configuration or {}
        if cleanup and str(configuration.get("delta.enableExpiredLogCleanup", "true")).lower() == "true":
            current.cleanup_metadata()
    except (OSError, DeltaError):  # a missed checkpoint costs reading time, never data
        log.warning("log checkpoint of %s at version %d failed", path, version, exc_info=True)


#: How long a process that ends waits for the log checkpoint the background thread is writing
#: (the ones not begun are left to the table's next writer). The interpreter must not finalize
#: while that thread is inside delta-rs: Python ends a daemon thread that wakes up during
#: finalization by unwinding its stack, through delta-rs's Rust frames, and the process dies of
#: SIGSEGV or SIGABRT after its work is done (measured: 11 of 20 such exits; a Dagster run
#: worker so killed reports a failed run).
EXIT_WAIT_SECONDS = 30.0

_pending: queue.Queue[tuple[str, DeltaTable]] = queue.Queue()
_worker_lock = threading.Lock()
_worker: threading.Thread | None = None
_in_delta_rs = threading.Lock()  # held by the thread while it writes a checkpoint
_ending = threading.Event()       # the process is ending: begin no checkpoint


def _later(path: str, current: DeltaTable) -> None:
    """Have the background thread write the log checkpoint of ``current`` (the snapshot of
    ``path`` this process holds) under the table's lock, unless the snapshot was forgotten or
    replaced by then. A daemon thread: a process that ends first leaves the checkpoints not
    begun to the table's next one (readers replay a few more commits meanwhile) and waits for
    the one under way (:func:`_finish_at_exit`)."""
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="lakestream-log-checkpoints", daemon=True)
            _worker.start()
            atexit.register(_finish_at_exit)
    _pending.put((path, current))


def _work() -> None:
    while True:
        path, current = _pending.get()
        try:
            with _in_delta_rs, snapshots.lock_for(path):
                if not _ending.is_set() and snapshots.get(path) is current:
                    _checkpoint(path, current, cleanup=True)
        except Exception:  # noqa: BLE001 - never let the thread die: later checkpoints need it
            log.warning("log checkpoint of %s failed", path, exc_info=True)
        finally:
            _pending.task_done()


def _finish_at_exit(timeout: float = EXIT_WAIT_SECONDS) -> None:
    """At interpreter exit: let the thread begin no other checkpoint, and wait (at most
    ``timeout``) for the one it is writing. The lock is kept: the thread never enters delta-rs
    again in this process."""
    _ending.set()
    if not _in_delta_rs.acquire(timeout=timeout):
        log.warning("a log checkpoint was still being written after %.0f s at exit; the process "
                    "may end abnormally (its commits are all made)", timeout)
