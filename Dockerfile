# The one image of every rip5 role (compose.yaml runs it as each of them):
#   docker build -t rip5 .   then   docker run rip5 <role> --help
FROM python:3.11-slim

WORKDIR /opt/rip5
# Every Python package at the version constraints.txt pins (as `make` installs them).
COPY pyproject.toml constraints.txt README.md ./
COPY rip5 rip5
COPY protocol protocol
COPY angelia_rpc angelia_rpc
COPY raft raft
COPY storage_node storage_node
COPY nameserver nameserver
COPY broker broker
COPY connector connector
COPY loadtest loadtest
COPY spark_batch spark_batch
RUN pip install --no-cache-dir -c constraints.txt . \
    && useradd --system --home-dir /data rip5 \
    && mkdir -p /data && chown rip5 /data

USER rip5
VOLUME /data
# Client gRPC, remoting, peers, and the metrics of broker, nameserver, storage; the
# nameserver's and storage node's RPC; the dashboard.
EXPOSE 8081 8080 8082 5557 5558 5559 9876 7701 8088
ENTRYPOINT ["rip5"]
CMD ["--help"]
