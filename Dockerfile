# icetail: `tail -f` for Apache Iceberg tables, as a service.
#
# Build from the repository root (see deploy/README.md):
#   docker build -t icetail:0.1.0 .
# Run (config and .pyiceberg.yaml in ./conf, state in a named volume):
#   docker run --rm -p 9464:9464 -v "$PWD/conf:/etc/icetail:ro" -v icetail-state:/var/lib/icetail icetail:0.1.0
#
# The base is pinned to Debian 12 (bookworm): the floating python:3.11-slim tag moved to
# Debian 13, which has no openjdk-17, and Spark 3.5 runs on Java 8/11/17 only. BASE_IMAGE is an
# argument so that a registry mirror (or a digest, python:3.11-slim-bookworm@sha256:...) can be
# named without editing this file; deploy/image/standin-base.sh builds a local stand-in that
# only the image smoke test uses (deploy/image/README.md).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# Stage 1: a Java 17 runtime holding only the JDK modules Spark and py4j use (jlink), instead of
# Debian's whole openjdk-17-jre-headless and the libraries it pulls in (deploy/image/README.md
# has the sizes), with its base class data archive (`--generate-cds-archive`, checked by
# `-Xshare:on`): every JVM maps the JDK's own classes from it, and the class cache below needs it.
# Spark 4's launcher adds jdk.incubator.vector and opens java.base and java.security.jgss
# (JavaModuleOptions); `make image-smoke` runs Spark on this runtime.
# /usr/share/man/man1 is missing in slim images and openjdk's postinst needs it. Not
# version-pinned on purpose: bookworm point releases carry the JDK security fixes, so rebuild
# to take them. The trust store is Debian's, resolved (the JDK's
# lib/security/cacerts is a link to /etc/ssl/certs/java/cacerts).
# hadolint ignore=DL3008
FROM ${BASE_IMAGE} AS jre
ARG JAVA_MODULES=java.base,java.compiler,java.datatransfer,java.desktop,java.instrument,java.logging,java.management,java.management.rmi,java.naming,java.net.http,java.prefs,java.rmi,java.scripting,java.security.jgss,java.security.sasl,java.sql,java.sql.rowset,java.transaction.xa,java.xml,java.xml.crypto,jdk.crypto.cryptoki,jdk.crypto.ec,jdk.httpserver,jdk.incubator.vector,jdk.jfr,jdk.localedata,jdk.management,jdk.management.agent,jdk.naming.dns,jdk.net,jdk.security.auth,jdk.security.jgss,jdk.unsupported,jdk.zipfs
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
 && jlink --add-modules "$JAVA_MODULES" --strip-java-debug-attributes --no-man-pages --no-header-files \
      --generate-cds-archive --output /opt/jre \
 && rm /opt/jre/lib/security/cacerts \
 && cp "$(readlink -f /etc/ssl/certs/java/cacerts)" /opt/jre/lib/security/cacerts \
 && /opt/jre/bin/java --list-modules > /dev/null \
 && /opt/jre/bin/java -Xshare:on -version

FROM ${BASE_IMAGE}

# Set by deploy/image/build.sh when it builds with buildah: this machine's pip settings, mounted
# into the RUN steps only. A build argument, not an ENV: the image does not keep it.
ARG PIP_CONFIG_FILE

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

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
# Dropped in the same layer as the install, so the bytes never land in one (deploy/image/README.md,
# "Size"); nothing of it is imported at run time, and the import check at the end proves the
# packages still load:
# - every `tests` directory inside an installed package: its own test suite, imported by pytest
#   only (today numpy's 13 suites, ~16 MB; pyarrow's, 7 MB; py4j's, fsspec's, certifi's; the
#   pyspark 4.3.0 wheel ships none). Public testing helpers (numpy.testing, pyspark.testing,
#   sqlalchemy.testing) are named `testing` and stay.
# - pyarrow's C++ headers and sources and its Cython sources (.pyx/.pxd/.pxi, includes/), and
#   numpy's C headers: for compiling against them; the compiled modules are kept, and the
#   image compiles nothing.
# - the debug information (DWARF sections) some wheels leave in their extension modules
#   (zstandard, pyroaring, PyYAML, SQLAlchemy's Cython modules, mmh3, pyiceberg's Avro decoder:
#   41 MB): read by debuggers only, never loaded; the code and the symbol tables stay
#   (`strip --strip-debug`). A module with an RPATH (one auditwheel patched) is left as it is,
#   since strip can undo patchelf's edits. binutils is installed for this and purged again in
#   this step (the packages it added, no more), with apt's lists and archives.
# hadolint ignore=DL3008
RUN dpkg-query -W -f '${Package}\n' | sort > /tmp/packages-before \
 && apt-get update \
 && apt-get install -y --no-install-recommends binutils \
 && pip install --no-deps -r requirements-image.txt \
 && pip check \
 && site="$(python -c 'import os, numpy; print(os.path.dirname(os.path.dirname(numpy.__file__)))')" \
 && find "$site" -mindepth 2 -type d -name tests -prune -exec rm -rf {} + \
 && rm -rf "$site/pyarrow/include" "$site/pyarrow/includes" "$site/pyarrow/src" "$site/numpy/_core/include" \
 && find "$site/pyarrow" -maxdepth 1 -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' \) -delete \
 && find "$site" -type f -name '*.so' -exec sh -c 'for f; do if readelf -S "$f" | grep -q "\.debug_info" && ! readelf -d "$f" | grep -qE "R(UN)?PATH"; then strip --strip-debug "$f"; fi; done' sh {} + \
 && dpkg-query -W -f '${Package}\n' | sort | comm -13 /tmp/packages-before - | xargs apt-get purge -y \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /tmp/packages-before \
 && python -c 'import numpy, pyarrow.compute, pyarrow.dataset, pyarrow.parquet, py4j.java_gateway, fsspec, certifi, pyiceberg.table, pyspark.sql' \
 && python -c 'import zstandard as z, yaml, pyroaring, mmh3, pyiceberg.avro.decoder_fast, sqlalchemy.engine._row_cy, sqlalchemy.util._collections_cy; assert z.backend == "cext" and z.decompress(z.compress(b"icetail")) == b"icetail" and yaml.__with_libyaml__'

# The Java 17 runtime of stage 1 for the Spark driver that pyspark launches, at an
# arch-independent JAVA_HOME. After the Python dependencies: a change to the runtime rebuilds
# neither them nor their layer.
COPY --from=jre /opt/jre /usr/lib/jvm/java-17
RUN /usr/lib/jvm/java-17/bin/java -version

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_LOCAL_IP=127.0.0.1

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

# The JVM class cache, written now rather than by the first start of every container (a start maps
# the classes Spark's JVM loads, ~118 MB, instead of loading and verifying them: docs/performance.md
# has the container's first start to /readyz with and without it). `icetail demo` runs a plan and a
# pipeline on Spark here; its JVM writes the archive as it exits, which is checked and adopted. The
# folder is root's: uid 10001 maps the archive and writes nothing there. The build's scratch (the
# demo in its own folder, Spark's in /tmp) goes with the step.
ENV ICETAIL_JVM_CLASS_CACHE=/opt/icetail/jvm-class-cache
RUN python -m icetail.reader.spark.class_cache_build "$ICETAIL_JVM_CLASS_CACHE" \
 && rm -rf /tmp/* /tmp/.[!.]* \
 && chmod -R a+rX,go-w "$ICETAIL_JVM_CLASS_CACHE"

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
