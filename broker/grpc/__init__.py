"""The RocketMQ gRPC v2 adapter: validate and convert only; status.py maps errors to codes."""
