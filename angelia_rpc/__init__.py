"""Angelia: the internal RPC layer (transports x codecs), the only way rip5
processes talk to each other."""
