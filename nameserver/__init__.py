"""Nameserver: the raft-replicated metadata service (topics, groups, placement,
leaders, leases)."""
