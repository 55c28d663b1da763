"""One Raft for the nameserver group and every storage group: a sans-IO core
and an asyncio driver that runs many groups over one shared WAL."""
