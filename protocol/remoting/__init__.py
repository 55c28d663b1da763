"""The classic RocketMQ remoting protocol (the 4.x clients' TCP wire), sans-IO.

``frames``: commands to and from bytes (an incremental decoder, an encoder,
the JSON and ROCKETMQ header serializations); ``codes``: request, response
and language codes; ``headers``: the typed request headers read from a
command's extFields, coerced as the different clients send them;
``messages``: message properties, batches and ids; ``bodies``: the JSON
bodies (routes, cluster info, heartbeats).

PURE.
"""
