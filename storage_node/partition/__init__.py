"""The partition (queue group) state machine: pure, applied from a raft group's log.

Public API: ``commands`` (what the log holds, ``encode``/``decode``),
``state.PartitionState`` (``apply``/``apply_entry`` and queries),
``results`` (what apply returns), ``snapshot`` (``take_snapshot``/``restore``).
"""
