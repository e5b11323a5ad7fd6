"""The row vocabulary of ``_state`` (its schema, typed columns, codecs, key groups) and the one
contract a run hands its checkpoint (:mod:`.changes`)."""
