"""Tools for operating pipelines, apart from running them: recover, reset, replay, discard
plans, compact and vacuum (``operations``); describe a pipeline, its lag and its state as of
a checkpoint, and the asset checks' invariants (``inspection``); migrate a changed pipeline's
state (``migrate``); bootstrap, export and import state offline (``state_io``). ``import ops
as sp`` exports what users call."""
