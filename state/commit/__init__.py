"""What a checkpoint commits: the record (:mod:`.record`), the log that commits it with the
changed state in one Delta commit (:mod:`.log`, :mod:`.appends`), batch plans, lifecycle hooks
and the global tables they keep consistent."""
