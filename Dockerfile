# The kraftsim image: a simulated Apache Kafka 3.9 KRaft controller, configured like the
# apache/kafka image (KAFKA_* and KRAFTSIM_* variables, CLUSTER_ID, format on first start).
#
#   docker build -t kraftsim .
#   docker run -p 9093:9093 -p 9464:9464 -v kraftsim-data:/var/lib/kraftsim/data kraftsim
#
# podman builds it too (`podman build --format docker`: its default OCI format drops the
# HEALTHCHECK); `make image` uses whichever is there.
#
# Two stages: the first builds the wheel and installs it with its dependencies into a venv;
# the second is the slim base plus that venv, so no compiler, pip cache or source tree ships.
# It needs BuildKit (docker's builder since 23.0) or podman/buildah, for RUN --mount.
#
# The base is a build argument: any image of Debian bookworm whose `python` is CPython 3.11 with
# its venv module, and with useradd. Where no container registry is reachable, `make image-base`
# makes one from Debian's packages (tests/container_image.py; the tests build on it):
#   docker build --build-arg PYTHON_IMAGE=localhost/kraftsim-base:bookworm -t kraftsim .
# pip takes its options from PIP_* build arguments: a mirror (PIP_INDEX_URL), or no index and a
# directory of wheels given as the build context named `wheels`, as the tests do:
#   --build-context wheels=DIR --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheels

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Empty unless the build names a `wheels` context: mounted for pip's install step only, so
# nothing of it reaches a layer.
FROM scratch AS wheels

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# Unset unless given, so that by default pip uses PyPI.
ARG PIP_INDEX_URL PIP_NO_INDEX PIP_FIND_LINKS
WORKDIR /src
# The whole context (.dockerignore keeps out venvs, data, tests and caches): kraftsim/ maps
# the top-level folders by symlink, so every folder it points to must come along.
COPY . .
# The zk extra (kazoo): a controller with zookeeper.metadata.migration.enable (compose's
# ZK_MIGRATION=true) talks to ZooKeeper through it.
# The codecs generated from the schemas are compiled once here, into a cache the controller
# reads at start-up instead of compiling them again (rpc/codegen.py).
ENV KRAFTSIM_CODEC_CACHE=/opt/kraftsim/codec-cache
RUN --mount=type=bind,from=wheels,target=/wheels \
    python -m venv /opt/kraftsim/venv \
    && /opt/kraftsim/venv/bin/pip install '.[zk]' \
    && /opt/kraftsim/venv/bin/kraftsim --version \
    && /opt/kraftsim/venv/bin/python -c "from kraftsim.rpc import registry; from kraftsim.metadata import records; \
[registry.message_class(n) for n in registry.names()]; [registry.message_class(n, records.SCHEMAS) for n in registry.names(records.SCHEMAS)]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kraftsim" \
      org.opencontainers.image.description="A simulated Apache Kafka 3.9 KRaft controller" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed uid/gid, so volume ownership and Kubernetes' fsGroup/runAsUser can name it.
RUN groupadd --system --gid 1000 kraftsim \
    && useradd --system --uid 1000 --gid kraftsim --home-dir /var/lib/kraftsim --no-create-home \
       --shell /usr/sbin/nologin kraftsim \
    && mkdir -p /var/lib/kraftsim/data /opt/kraftsim/config /etc/kraftsim/docker /mnt/shared/config \
    && chown -R kraftsim:kraftsim /var/lib/kraftsim /opt/kraftsim/config
COPY --from=build /opt/kraftsim/venv /opt/kraftsim/venv
COPY --from=build /opt/kraftsim/codec-cache /opt/kraftsim/codec-cache
COPY deploy/docker/server.properties /etc/kraftsim/docker/server.properties
COPY deploy/docker/entrypoint.sh /etc/kraftsim/docker/run
ENV PATH=/opt/kraftsim/venv/bin:$PATH \
    KRAFTSIM_CODEC_CACHE=/opt/kraftsim/codec-cache \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
WORKDIR /var/lib/kraftsim
# The metadata log dir (log.dirs in /etc/kraftsim/docker/server.properties).
VOLUME ["/var/lib/kraftsim/data"]
# Kafka protocol (CONTROLLER listener), then HTTP: /metrics and /healthz.
EXPOSE 9093 9464
# 200 once the controller is active. The probe reads kraftsim.http.listen from the written
# config, so a moved HTTP port needs no change here.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "kraftsim.cli.container", "healthcheck"]
# The controller runs as PID 1 (the entrypoint execs it) and handles SIGTERM itself: it stops
# serving, fsyncs and closes the log, and exits 0. No init shim is needed: it has no children.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/etc/kraftsim/docker/run"]
