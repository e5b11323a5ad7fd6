"""Names of the columns lakestream adds to what it writes, in one place.

Sinks tag every row with its batch and position; state tables' changelogs say what changed;
merged streams say where a row came from. Readers (analytics, tests, users' SQL) take the names
from here rather than spelling them out.

>>> from ops.columns import BATCH_COLUMN, CHANGE_COLUMN
>>> BATCH_COLUMN, CHANGE_COLUMN
('_batch_id', '_change')
"""

BATCH_COLUMN = "_batch_id"   # the micro-batch that wrote the row
ROW_COLUMN = "_row"          # the row's position in its batch's output (in its source's order)
CHANGE_COLUMN = "_change"    # insert / update / delete, in a state table's changelog
OLD_COLUMN = "_old"          # the values a change replaced, JSON, in a changelog
SOURCE_COLUMN = "_source"    # which source of a merged stream a row came from
SIGN_COLUMN = "_sign"        # +1 a row added to a table, -1 one retracted (aggregating a table)
CHANGE_NO_COLUMN = "_change_no"  # which change of its batch a signed row is from (an update: two)
#: A FINAL tumbling window's changelog: the earliest ``window_start`` it may still emit (its
#: stream time, as a window start), so a window over its rows closes when Spark's would.
WATERMARK_COLUMN = "_watermark"

#: ksqlDB's ROWTIME: the record's own time, given to a stream registered without an event-time
#: column where its source has one (a Kafka record's timestamp, a publish's or file's time).
ROWTIME = "ROWTIME"

#: What every row read from Kafka carries besides its value's fields; ``_key`` (the record's
#: key as text) keys the stream unless the source names other key fields.
KAFKA_KEY = "_key"
KAFKA_COLUMNS = (KAFKA_KEY, "_topic", "_partition", "_offset", "_timestamp")

#: Distributed mode: a row's place in its batch, carried through the stages (internal).
ORDER_COLUMN = "__order"
#: Ordinals of source rows start here, so no operator's own 0, 1, 2… index is taken for them.
FIRST_ORDINAL = 1 << 40

#: What sinks and changelogs add to a table: a join leaves them out of what it copies from one.
WRITTEN_COLUMNS = (BATCH_COLUMN, ROW_COLUMN, CHANGE_COLUMN, OLD_COLUMN, WATERMARK_COLUMN)
