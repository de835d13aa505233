# One image for every stripemq role: ZooKeeper (Debian's package, run by `stripemq zookeeper`),
# bookie, broker, auto-recovery, the init job and the toolset. The Helm chart picks the role
# with the container's command.
#
#   docker build -t stripemq:0.1 .
#   docker run --rm -p 6650:6650 -p 8080:8080 stripemq:0.1     # a standalone, to try it

# --- build the wheel -----------------------------------------------------------------------
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY stripemq ./stripemq
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- the runtime image ---------------------------------------------------------------------
FROM python:3.11-slim-bookworm
# Debian's ZooKeeper brings its Java runtime; nothing else from apt is needed.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends zookeeper \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels

# Non-root, with the uid/gid the chart's securityContext names (runAsUser/fsGroup 10000).
RUN groupadd --system --gid 10000 stripemq \
    && useradd --system --uid 10000 --gid 10000 --home-dir /stripemq --shell /usr/sbin/nologin stripemq \
    && mkdir -p /stripemq/data \
    && chown -R stripemq:stripemq /stripemq
USER 10000:10000
WORKDIR /stripemq
ENV PYTHONUNBUFFERED=1

EXPOSE 2181 2888 3888 3181 3182 6650 6651 8000 8080 8443
# Clients outside the container reach it through the published ports on localhost.
CMD ["stripemq", "standalone", "--data-dir", "/stripemq/data/standalone", \
     "-c", "bind_address=0.0.0.0", "-c", "advertised_address=localhost"]
