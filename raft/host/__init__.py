"""The multi-group host: many raft groups of one node, driven together.

:mod:`raft.host.multiraft` is the pure round (collect, persist, send, apply,
advance); :mod:`raft.host.driver` runs it on an event loop over the shared
WAL; :mod:`raft.host.transport` and :mod:`raft.host.angelia_transport` carry
the batches of :mod:`raft.host.wire` between nodes.
"""
