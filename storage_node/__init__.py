"""Storage node: hosts raft groups whose logs are the commit logs of queues."""
