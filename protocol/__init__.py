"""Wire formats shared by every process: RocketMQ gRPC v2 messages, the remoting
codec, the message record format and the internal request/response types.

PURE: nothing here performs I/O or reads a clock or a random source.
"""
