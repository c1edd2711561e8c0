# icetail: `tail -f` for Apache Iceberg tables, as a service.
#
# Build from the repository root (see deploy/README.md):
#   docker build -t icetail:0.1.0 .
# Run (config and .pyiceberg.yaml in ./conf, state in a named volume):
#   docker run --rm -p 9464:9464 -v "$PWD/conf:/etc/icetail:ro" -v icetail-state:/var/lib/icetail icetail:0.1.0
#
# The base is pinned to Debian 12 (bookworm): the floating python:3.11-slim tag moved to
# Debian 13, which has no openjdk-17, and Spark 3.5 runs on Java 8/11/17 only.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java 17 runtime for the Spark driver that pyspark launches. /usr/share/man/man1 is missing in
# slim images and openjdk's postinst needs it. /usr/lib/jvm/java-17 is an arch-independent
# JAVA_HOME (the real directory is java-17-openjdk-amd64 or -arm64). Not version-pinned on
# purpose: bookworm point releases carry the JDK security fixes.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17 \
 && /usr/lib/jvm/java-17/bin/java -version

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_LOCAL_IP=127.0.0.1

# A fixed numeric uid/gid so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 icetail \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/icetail --no-create-home \
      --shell /usr/sbin/nologin icetail \
 && mkdir -p /var/lib/icetail /etc/icetail \
 && chown 10001:10001 /var/lib/icetail

WORKDIR /opt/icetail

# Dependencies first, every one pinned (requirements-image.txt: pyproject's runtime dependencies
# and the postgres extra, resolved on the Spark 4 line), so a source change does not reinstall
# them and two builds of one commit install the same versions.
COPY pyproject.toml requirements-image.txt ./
RUN pip install --no-deps -r requirements-image.txt \
 && pip check

# Then the packages themselves. README.md is optional: a glob may match nothing as long as
# another source of the same COPY exists.
COPY pyproject.toml README.m[d] ./
COPY icetail ./icetail
COPY state ./state
COPY reader ./reader
COPY monitor ./monitor
RUN pip install --no-deps . \
 && rm -rf build ./*.egg-info \
 && icetail --help > /dev/null

# Writable places under a read-only root filesystem: /tmp (Spark scratch, java.io.tmpdir) and
# /var/lib/icetail (SQLite checkpoint store, HOME, working directory).
ENV HOME=/var/lib/icetail \
    PYICEBERG_HOME=/etc/icetail
WORKDIR /var/lib/icetail
VOLUME ["/tmp", "/var/lib/icetail"]

USER 10001:10001

# /metrics, /healthz and /readyz (change with --metrics-port and ICETAIL_METRICS_PORT together).
EXPOSE 9464
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('ICETAIL_METRICS_PORT', '9464') + '/healthz', timeout=4)"]

ENTRYPOINT ["icetail"]
CMD ["serve", "--config", "/etc/icetail/icetail.yaml"]
