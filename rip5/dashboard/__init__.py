"""``rip5 dashboard``: a web console over the admin API (docs/dashboard.md).

Pages render on the server (Starlette + Jinja2, no script needed, no CDN):
cluster and nodes, raft groups, topics (create, update, delete), consumer
groups with lag per queue and the clients connected to every broker (gRPC
clients with their id, language and version), message query with a body
preview, dead letters (view and resend), and a throughput chart from the
brokers' metrics.
"""
