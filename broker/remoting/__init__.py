"""The classic RocketMQ remoting protocol (4.x clients): adapter and TCP server."""
