"""Body stores: where a replica finds the body of a queue entry.

A partition's queue index maps queue offset -> ``(log_index, position)``:
the APPEND log entry at ``log_index`` holds the record batch (the raft log
is the commit log). A :class:`~storage_node.store.base.BodyStore` answers
"the bytes of APPEND entry ``log_index`` of group ``g``" and decides which
bodies a group snapshot must carry:

- ``memory.MemoryBodyStore`` (PURE): keeps every applied APPEND entry in
  memory; a snapshot carries every referenced body. For tests, simulation
  and nodes without disks.
- ``segment_files.WalBodyStore`` (SHELL): reads entries back from the
  node's WAL segments (nothing is written twice); only bodies adopted from
  a leader's group image, which this node's log never held, are kept aside
  and carried by its snapshots. ``segment_files.index_sealed_segments``
  writes the per-segment index that makes a sealed segment self-describing
  (format: docs/storage-format.md; offline reader: ``protocol.segments``).
"""
