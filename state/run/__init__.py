"""What a run holds: each operator's state in memory (:mod:`.store`, as objects or columns,
stored as text or typed columns), its timers, and the tracked variables saved with each
checkpoint."""
