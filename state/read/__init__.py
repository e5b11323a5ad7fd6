"""What is read back: a run's lookups of stored keys (:mod:`.lookup`, without Spark), the
latest state per key through Spark (:mod:`.latest`), and reads from outside a pipeline
(:mod:`.queries`)."""
