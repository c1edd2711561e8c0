#!/usr/bin/env bash
# Run icetail's incremental batch job (`icetail run --until-caught-up ...`) with spark-submit
# against any Spark master, shipping icetail's packages to the executors with --py-files.
#
#   deploy/spark-submit.sh --catalog prod --table analytics.events \
#       --state sqlite:////var/lib/icetail/state.db --sink URL [--consumer ID] [...]
#
# Every argument goes to `icetail run --until-caught-up` (a leading `run` is accepted too).
# Environment:
#   SPARK_MASTER        master URL (default local[*]), e.g. spark://host:7077, yarn, k8s://...
#   SPARK_SUBMIT        the spark-submit to use (default $SPARK_HOME/bin/spark-submit, else PATH)
#   SPARK_SUBMIT_ARGS   extra spark-submit options, word-split: "--conf spark.executor.memory=4g"
#   SPARK_APP_NAME      application name (default icetail)
#   PYTHON              interpreter that builds the zip (default python3)
# The driver and executors need icetail's dependencies (pyiceberg, pyarrow, pyroaring, ...)
# in their Python: the same image, or a packed environment via --archives and
# spark.pyspark.python (see deploy/README.md). Only icetail's own code travels in the zip.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

if [[ -n "${SPARK_SUBMIT:-}" ]]; then
  submit="$SPARK_SUBMIT"
elif [[ -n "${SPARK_HOME:-}" && -x "$SPARK_HOME/bin/spark-submit" ]]; then
  submit="$SPARK_HOME/bin/spark-submit"
else
  submit="$(command -v spark-submit || true)"
fi
if [[ -z "$submit" ]]; then
  echo "spark-submit.sh: no spark-submit found: set SPARK_HOME or SPARK_SUBMIT, or put it on PATH" >&2
  exit 2
fi

workdir="$(mktemp -d "${TMPDIR:-/tmp}/icetail-submit.XXXXXX")"
trap 'rm -rf "$workdir"' EXIT

# icetail.zip: the icetail package laid out as installed (icetail/, and the repository's reader/,
# monitor/ and state/ as icetail/reader, ...: pyproject's package-dir), without bytecode caches.
"${PYTHON:-python3}" - "$root" "$workdir/icetail.zip" <<'PY'
import os
import sys
import zipfile

root, target = sys.argv[1], sys.argv[2]
homes = {"icetail": "icetail", "icetail/state": "state", "icetail/reader": "reader", "icetail/monitor": "monitor"}
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
    for package, folder in homes.items():
        home = os.path.join(root, folder)
        if not os.path.isfile(os.path.join(home, "__init__.py")):
            sys.exit(f"spark-submit.sh: {folder}/__init__.py not found under {root}")
        for dirpath, dirnames, filenames in os.walk(home):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    zf.write(path, os.path.join(package, os.path.relpath(path, home)))
PY

if [[ "${1:-}" == "run" ]]; then
  shift
fi

extra=()
if [[ -n "${SPARK_SUBMIT_ARGS:-}" ]]; then
  read -r -a extra <<< "$SPARK_SUBMIT_ARGS"
fi

# No exec: the EXIT trap must still remove the temporary zip.
"$submit" \
  --master "${SPARK_MASTER:-local[*]}" \
  --name "${SPARK_APP_NAME:-icetail}" \
  --py-files "$workdir/icetail.zip" \
  ${extra[@]+"${extra[@]}"} \
  "$here/icetail_submit.py" run --until-caught-up "$@"
