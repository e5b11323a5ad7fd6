"""The Operator interface: what the runtime calls on each step of a pipeline, and in which order.

An operator turns one batch's rows (a pandas frame, in source order) into its output rows, and
may keep managed state in the run's store. It declares what state it keeps
(:class:`StateDeclaration`), so the runtime can decide where it runs: a stateless operator runs
wherever its rows are, a keyed one wherever its keys' rows and state are brought together, an
unkeyed one where it sees the whole batch.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from state import EntryColumns, Hooks, StateType, expiry_state, timer_state

from ..context import BatchScope


class StateKind(enum.Enum):
    """How an operator's managed state is partitioned."""

    STATELESS = "stateless"  # no managed state
    KEYED = "keyed"          # one value per key: a key's rows need only that key's state
    UNKEYED = "unkeyed"      # one value for the whole stream: needs every row of the batch


@dataclass(frozen=True)
class TimerDeclaration:
    """A keyed operator's timers and state TTL (see :mod:`ops.operators.timing`): its name, the
    ``event_time`` column whose values move its watermark (less ``delay_ms``; ``None``:
    deadlines are processing times), and ``ttl_ms`` (``None``: state never expires)."""

    operator: str
    event_time: str | None = None
    delay_ms: int = 0
    ttl_ms: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The state names its deadlines are kept under (timers, then TTL deadlines)."""
        timers = (timer_state(self.operator),)
        return timers + ((expiry_state(self.operator),) if self.ttl_ms is not None else ())


@dataclass(frozen=True)
class StateDeclaration:
    """What state an operator keeps.

    ``keys``: the columns whose values key the state (``KEYED`` only). ``names``: the names it
    keeps state under in the store (``scope.store.operator(name, …)``). ``shared``: entries of a
    keyed operator's state that belong to no key of the data but to the operator as a whole
    (a window's stream time); distributed mode runs such an operator by key only when it knows
    how to keep them (event-time operators), else as one task. ``clock``: the operator's
    timers and TTL, whose deadlines are kept under more of its ``names``. ``entries``: those of
    its ``names`` that hold many rows per key (a list's elements, a map's entries:
    ``scope.store.entries(name, columns)``), each with its columns.

    >>> StateDeclaration.keyed(("user",), "clicks").kind.value
    'keyed'
    """

    kind: StateKind
    keys: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    clock: TimerDeclaration | None = None
    entries: tuple[tuple[str, EntryColumns], ...] = ()

    @classmethod
    def stateless(cls) -> StateDeclaration:
        return cls(StateKind.STATELESS)

    @classmethod
    def keyed(cls, keys: tuple[str, ...], name: str, shared: tuple[str, ...] = ()) -> StateDeclaration:
        return cls(StateKind.KEYED, tuple(keys), (name,), shared)

    @classmethod
    def unkeyed(cls, name: str) -> StateDeclaration:
        return cls(StateKind.UNKEYED, (), (name,))


@dataclass(frozen=True)
class InferredState:
    """The storage an operator's state would take if no checkpoint recorded one: ``kind``
    (``None``: text) and where it comes from (``origin``, e.g. ``state=0``), for messages."""

    kind: StateType | None
    origin: str


#: The column of the rows a keyed operator adds to its input (:meth:`Operator.added_rows`): each
#: added row's record, pickled; null on the input's own rows
ADDED_ROW = "__added_row"


class Operator(ABC):
    """One step of a pipeline.

    What the runtime calls, in order:

    1. ``plan_inputs(spark)`` whenever it plans new batches: extra inputs to pin in the plans
       (a looked-up table's version). Not called for a replayed batch, whose plan is reused.
    2. ``apply(scope, frame)`` once per batch, batches in order, with the batch's rows as the
       operator before it returned them. A batch that crashed is applied again on replay with
       the same rows and the state of the last checkpoint, so ``apply`` must be deterministic
       given (rows, state, ``scope.batch_id``): no wall clock, no unseeded randomness.

    Managed state goes through ``scope.store.operator(self.name, initial)``; it is saved with
    the next checkpoint and restored after a crash. Subclasses declare it in :meth:`declares`
    (the default, unkeyed state under the operator's name, is the safe one: such an operator
    always sees the whole batch). ``hooks`` are the operator's lifecycle hooks, ``codec`` how its
    state values are stored (``"json"`` or ``"pickle"``).

    >>> class Doubler(Operator):
    ...     name = "doubler"
    ...     def declares(self):
    ...         return StateDeclaration.stateless()
    ...     def apply(self, scope, frame):
    ...         return frame.assign(x=frame["x"] * 2)
    >>> Doubler().apply(None, pd.DataFrame({"x": [1, 2]}))["x"].tolist()
    [2, 4]
    """

    name: str
    hooks: Hooks | None = None
    codec: str = "json"
    #: Reads tables through ``scope.spark`` while it runs, so it cannot run on an executor.
    needs_spark = False

    def declares(self) -> StateDeclaration:
        """The state this operator keeps (see :class:`StateDeclaration`)."""
        return StateDeclaration.unkeyed(self.name)

    @property
    def driver_only(self) -> str | None:
        """Why it cannot run on executors, other than :attr:`needs_spark` (distributed mode
        refuses it, naming this); ``None``: it can."""
        return None

    def added_rows(self, batch_id: int) -> pd.DataFrame | None:
        """Rows a keyed operator adds to its input in batch ``batch_id`` (with its key columns,
        so that on executors each reaches the task of its key, and the rest of each row in the
        :data:`ADDED_ROW` column), such as a StatefulProcessor's initial state in the
        pipeline's first batch; ``None``: none (the default)."""
        return None

    def state_shape(self) -> dict[str, Any]:
        """What this operator's stored values look like, beyond what it declares (JSON: the
        type of a map's initial value, an aggregate's functions, a window's size). Each
        checkpoint records it; a run whose operator gives another shape stops before reading
        the state (see :mod:`ops.runtime.meaning`). Default: nothing more to say."""
        return {}

    def state_types(self) -> dict[str, StateType]:
        """The state names this operator stores in typed columns, and their types (see
        :mod:`state.run.encodings`); the others are stored as text. Default: none."""
        return {}

    def inferable_state_types(self) -> dict[str, InferredState]:
        """The state names whose storage this operator leaves to the run (no declaration), each
        with the type inferred for it (``kind=None``: none, text), which the run applies to a name
        no checkpoint recorded yet; a recorded name keeps what is stored
        (:mod:`ops.runtime.storage`). Default: none (what it stores is its own to say)."""
        return {}

    @property
    def table_keys(self) -> tuple[str, ...] | None:
        """The key columns of the table whose changes this operator emits (aggregations,
        ``as_table``, table joins: what ``.write.to_table()`` materialises), or ``None`` when
        its output is a plain stream."""
        return None

    @property
    def one_change_per_key(self) -> bool:
        """Whether a batch's table changes hold at most one row per key (what a state table's
        upsert can apply as it is); ``False`` for per-record emission."""
        return True

    def state_key(self, values: tuple[Any, ...]) -> Any:
        """The key this operator keeps a row's state under, from the values of its declared
        key columns (Python scalars): the value itself for one column, else the tuple.
        Executors route rows by it, so it must be what the operator passes to the store."""
        return values[0] if len(values) == 1 else values

    def plan_inputs(self, spark: SparkSession) -> dict[str, tuple[Any, Any]]:
        """Extra inputs to pin in each new batch plan, so a replayed batch sees exactly what
        the first attempt saw. Most operators have none."""
        return {}

    @abstractmethod
    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        """This operator's output for ``frame`` (one batch's rows, in order)."""


class TableOperator(Operator):
    """An operator keyed by its ``keys`` columns whose output is the change rows of a table keyed
    the same way (aggregations, ``as_table``, table joins), ready for ``.write.to_table()``."""

    keys: tuple[str, ...]

    @property
    def table_keys(self) -> tuple[str, ...]:
        return self.keys

    def declares(self) -> StateDeclaration:
        return StateDeclaration.keyed(self.keys, self.name)
