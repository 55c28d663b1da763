"""RocketMQ gRPC v2: our own .proto files and the code generated from them.

The message and service names, field names and field numbers are the public
protocol of Apache RocketMQ 5 (the clients depend on them); the files are
written for rip5. Regenerate with ``python -m protocol.rocketmq.v2.generate``;
a test checks the checked-in code matches a fresh generation.
"""
