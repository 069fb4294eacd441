# vllm-headroom sidecar image.
#   deploy/docker/build vllm-headroom      (tags vllm-headroom:<version>; the version is read from pyproject.toml)
# Runs `vllm-headroom serve` as uid 65532 on port 9478; every setting is an env var VLLM_HEADROOM_* (see README),
# e.g. VLLM_HEADROOM_TARGET=http://127.0.0.1:8000. Nothing at run time needs a shell or a writable filesystem.
# serve, demo and replay each read their own listen address (VLLM_HEADROOM_WEB_LISTEN_ADDRESS,
# VLLM_HEADROOM_DEMO_LISTEN_ADDRESS, VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS); the HEALTHCHECK follows the one the
# running command uses, including a --web.listen-address given on the command line; for serve it asks the probes'
# own listener (--web.health-address, default the listen port + 1 = 9479) and the main port only if nothing
# listens there, so a crowd on the main port never fails it.
# The entrypoint is the CLI and `serve` only its default command: `docker run IMAGE diagnose http://vllm:8000`.
# Labels: pass --build-arg SOURCE=<repository URL> --build-arg REVISION=$(git rev-parse HEAD) when publishing.
# VERSION has no default here: pyproject.toml holds it once; deploy/docker/build passes it, and a VERSION that
# differs from the package's fails the build.
# BASE_IMAGE must be a Debian-based Python 3.11 image with `python` on PATH; CI builds a local stand-in
# (deploy/build-base-image) because it reaches no registry.
ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG VERSION=""
ARG SOURCE=""
ARG REVISION=""

FROM ${BASE_IMAGE} AS build
ARG VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# Only the runtime dependencies and the package go into the venv; pip and setuptools leave it afterwards.
RUN python -m venv /opt/vllm-headroom \
    && /opt/vllm-headroom/bin/pip install --no-cache-dir . \
    && /opt/vllm-headroom/bin/pip uninstall --yes pip setuptools \
    && built=$(/opt/vllm-headroom/bin/python -c 'import exporter; print(exporter.__version__)') \
    && if [ -n "$VERSION" ] && [ "$VERSION" != "$built" ]; then \
         echo "--build-arg VERSION=$VERSION differs from the package's $built (pyproject.toml)" >&2; exit 1; fi
COPY deploy/docker/healthcheck.py /opt/vllm-headroom/healthcheck.py

FROM ${BASE_IMAGE}
ARG VERSION
ARG SOURCE
ARG REVISION
LABEL org.opencontainers.image.title="vllm-headroom" \
      org.opencontainers.image.description="Sidecar that tells why vLLM requests wait: KV admission headroom, worst-case blocks and a verdict as Prometheus metrics" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/vllm-headroom /opt/vllm-headroom
ENV PATH=/opt/vllm-headroom/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VLLM_HEADROOM_WEB_LISTEN_ADDRESS=0.0.0.0:9478 \
    VLLM_HEADROOM_DEMO_LISTEN_ADDRESS=0.0.0.0:9478 \
    VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS=0.0.0.0:8000
# Numeric, so Kubernetes' runAsNonRoot can verify it without an /etc/passwd entry.
USER 65532:65532
WORKDIR /
EXPOSE 9478 9479
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["/opt/vllm-headroom/bin/python", "/opt/vllm-headroom/healthcheck.py"]
ENTRYPOINT ["/opt/vllm-headroom/bin/vllm-headroom"]
CMD ["serve"]
