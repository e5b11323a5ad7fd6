"""How every commit this package makes is made: idempotent by Delta's ``txn``, tried again on the
table as another writer left it when it loses a race (as Delta's optimistic concurrency does for
blind appends), with ``userMetadata``, and followed by a log checkpoint every tenth version.

delta-rs looks for expired log files to delete (a ``LIST`` of the whole ``_delta_log``, which
grows with every commit until the retention, 30 days by default, lets files go) after every
commit unless told otherwise; here it does so after every tenth version only
(:func:`post_commit`), as Spark does at its log checkpoints: what it deletes is the same, a few
commits later."""

from __future__ import annotations

import logging
from collections.abc import Callable

from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError

from ..errors import StorageError
from .cache import snapshots, synced
from .stores import calling

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


def post_commit(current: DeltaTable) -> PostCommitHookProperties:
    """What delta-rs does after a commit made on ``current``: the log checkpoint the table's
    interval asks for, and the cleanup of expired log files (as the table's settings say) only
    when the commit's version is a multiple of :data:`CHECKPOINT_EVERY`; else none, which
    saves a ``LIST`` of the whole log per commit on an object store. Skipping it changes
    nothing but when expired files go: the next cleanup deletes them."""
    cleanup = None if (int(current.version()) + 1) % CHECKPOINT_EVERY == 0 else False
    return PostCommitHookProperties(cleanup_expired_logs=cleanup)


def checkpoint_now_and_then(path: str, current: DeltaTable) -> None:
    """Every tenth version of a table without ``delta.checkpointInterval`` (one Spark made),
    write the log checkpoint Spark's own commit would have written (delta-rs's own default is
    every hundredth), so neither reader replays a long log. delta-rs checkpoints the tables it
    made itself (they carry the property)."""
    version = int(current.version())
    if version % CHECKPOINT_EVERY or "delta.checkpointInterval" in (current.metadata().configuration or {}):
        return
    try:
        current.create_checkpoint()
    except (OSError, DeltaError):  # a missed checkpoint costs reading time, never data
        log.warning("log checkpoint of %s at version %d failed", path, version, exc_info=True)
