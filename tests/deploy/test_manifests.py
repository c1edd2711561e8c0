"""The deploy files agree with each other and with the code: k8s manifests, Dockerfile,
.dockerignore, Grafana dashboard and deploy/spark-submit.sh.

Cross-checks: probes, ports and annotations match the metrics port; the image's entrypoint
args name real subcommands; every icetail_* series a dashboard query uses is one that
monitor.metrics exports; each dashboard query is valid PromQL for a real Prometheus.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from icetail.monitor.service.http_server import MonitorServer
from icetail.monitor.service.metrics import Metrics
from tests.support.layout import installed_files

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DASHBOARD = DEPLOY / "grafana" / "icetail-dashboard.json"
METRICS_PORT = 9464
SUBCOMMANDS = {"serve", "run"}
PROMETHEUS = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")


def store_urls() -> Any:
    """icetail.state.urls, the checkpoint store URL parser (imported lazily: skip while it is not there)."""
    return pytest.importorskip("icetail.state.urls")


def load_all(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path} holds no YAML document"
    return docs


def k8s_objects() -> dict[tuple[str, str], dict[str, Any]]:
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in load_all(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    return k8s_objects()


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        spec: dict[str, Any] = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    else:
        spec = obj["spec"]["template"]["spec"]
    return spec


def container(obj: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(obj)["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


def dockerfile() -> dict[str, str]:
    """Instruction -> its (last) argument text, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out[word.upper()] = rest.strip()
    return out


# --- YAML and Kubernetes objects -----------------------------------------------------------


def test_every_yaml_file_parses() -> None:
    paths = sorted(DEPLOY.rglob("*.yaml")) + sorted(DEPLOY.rglob("*.yml"))
    assert len(paths) >= 10
    for path in paths:
        load_all(path)


def test_expected_objects_exist(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert set(objects) >= {
        ("ConfigMap", "icetail-config"),
        ("PersistentVolumeClaim", "icetail-batch-state"),
        ("Deployment", "icetail"),
        ("PodDisruptionBudget", "icetail"),
        ("Service", "icetail"),
        ("ServiceMonitor", "icetail"),
        ("Secret", "icetail-state-postgres"),
        ("CronJob", "icetail-batch"),
    }
    for obj in objects.values():
        assert obj["apiVersion"] and obj["metadata"]["labels"]["app.kubernetes.io/name"] == "icetail"


def test_kustomization_lists_existing_files() -> None:
    kustomization = load_all(K8S / "kustomization.yaml")[0]
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), resource
    if shutil.which("kubectl") is None:
        return  # kubectl is optional here; the structure is checked above and below
    built = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(built.stdout) if d}
    assert kinds == {"ConfigMap", "Deployment", "PodDisruptionBudget", "Service"}


def test_deployment_runs_serve_replicas_with_probes_on_the_metrics_port(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    dep = objects[("Deployment", "icetail")]
    assert dep["spec"]["replicas"] == 3  # replicas divide the consumers (docs/delivery.md, "Replicas")
    strategy = dep["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}  # never below `replicas`
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    c = container(dep)
    assert c["args"][0] == "serve" and c["args"][0] in SUBCOMMANDS
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": METRICS_PORT}
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert get["port"] in ("metrics", METRICS_PORT)
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def test_pods_are_locked_down_and_mount_writable_scratch(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    uid = int(dockerfile()["USER"].split(":")[0])
    for key in (("Deployment", "icetail"), ("CronJob", "icetail-batch")):
        obj = objects[key]
        spec, c = pod_spec(obj), container(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == uid
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert set(mounts.values()) <= set(volumes), "a mount names a missing volume"
        assert "emptyDir" in volumes[mounts["/tmp"]]
        if key[0] == "Deployment":  # replicas on several nodes share the PostgreSQL store, nothing on a volume
            assert "emptyDir" in volumes[mounts["/var/lib/icetail"]]
        else:  # the CronJob's SQLite store, on its own claim
            claim = volumes[mounts["/var/lib/icetail"]]["persistentVolumeClaim"]["claimName"]
            assert ("PersistentVolumeClaim", claim) in objects
        assert volumes[mounts["/etc/icetail"]]["configMap"]["name"] == "icetail-config"
        env = {e["name"]: e for e in c.get("env", [])}
        assert env["PYICEBERG_HOME"]["value"] == "/etc/icetail"
        submit_args = shlex.split(env["PYSPARK_SUBMIT_ARGS"]["value"])
        assert submit_args[-1] == "pyspark-shell"
        local_dirs = [a.split("=", 1)[1] for a in submit_args if a.startswith("spark.local.dir=")]
        assert len(local_dirs) == 1
        assert "emptyDir" in volumes[mounts[local_dirs[0]]], "spark.local.dir must be on an emptyDir"


def test_service_and_servicemonitor_select_the_pods(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    dep, svc, sm = (
        objects[("Deployment", "icetail")],
        objects[("Service", "icetail")],
        objects[("ServiceMonitor", "icetail")],
    )
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (port,) = svc["spec"]["ports"]
    assert port == {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"


def test_cronjob_runs_the_incremental_job(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    cron = objects[("CronJob", "icetail-batch")]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    args = container(cron)["args"]
    assert args[0] == "run" and args[0] in SUBCOMMANDS
    assert "--until-caught-up" in args
    for flag in ("--catalog", "--table", "--state", "--sink", "--consumer"):
        assert flag in args
    urls = store_urls()
    assert isinstance(urls.parse_store_url(args[args.index("--state") + 1]), urls.SqliteLocation)
    assert pod_spec(cron)["restartPolicy"] == "Never"


def test_configmap_holds_icetail_and_pyiceberg_config(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    data = objects[("ConfigMap", "icetail-config")]["data"]
    assert set(data) == {"icetail.yaml", ".pyiceberg.yaml"}
    config = yaml.safe_load(data["icetail.yaml"])
    catalogs = yaml.safe_load(data[".pyiceberg.yaml"])["catalog"]
    assert config["catalog"] in catalogs
    assert "state" not in config, "the store's URL holds a password: ICETAIL_STATE from the Secret names it"
    assert config["metrics_port"] == METRICS_PORT
    assert config["metrics_host"] == "0.0.0.0"
    assert config["tables"], "at least one table/consumer pair"
    for entry in config["tables"]:
        assert {"consumer", "sink"} <= set(entry) and len({"table", "namespace"} & set(entry)) == 1
        assert "." in entry.get("table", "") or "{table}" in entry["consumer"]  # a pattern's: one consumer per table
    pairs = [(e.get("table") or e["namespace"], e["consumer"]) for e in config["tables"]]
    assert len(pairs) == len(set(pairs))


def test_configmap_passes_the_loader_of_run_and_serve(
    objects: dict[tuple[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    """The shipped icetail.yaml read as `serve --config` reads it: typed values, every sink usable."""
    cli = pytest.importorskip("icetail.monitor.cli.main")
    from icetail.monitor.service.config import build_service_config
    from icetail.sinks.urls import normalize_sink_url

    path = tmp_path / "icetail.yaml"
    path.write_text(objects[("ConfigMap", "icetail-config")]["data"]["icetail.yaml"])
    environ = dict(objects[("Secret", "icetail-state-postgres")]["stringData"])  # ICETAIL_STATE, as envFrom sets it
    config = build_service_config(cli.build_parser().parse_args(["serve", "--config", str(path)]), environ=environ)
    assert config.pipelines and config.patterns and config.metrics_port == METRICS_PORT
    for pipeline in (*config.pipelines, config.patterns[0].pipeline("orders_eu")):
        assert normalize_sink_url(pipeline.sink_url)


def test_postgres_secret_is_a_valid_store_url(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    secret = objects[("Secret", "icetail-state-postgres")]
    urls = store_urls()
    location = urls.parse_store_url(secret["stringData"]["ICETAIL_STATE"])
    assert isinstance(location, urls.PostgresLocation) and location.schema == "icetail"
    # the Deployment requires it: its replicas share that store (a SQLite file serves one host)
    env_from = container(objects[("Deployment", "icetail")])["envFrom"]
    assert {"secretRef": {"name": "icetail-state-postgres"}} in env_from


def test_disruption_budget_covers_the_replicas_one_at_a_time(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    dep, pdb = objects[("Deployment", "icetail")], objects[("PodDisruptionBudget", "icetail")]
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1 < dep["spec"]["replicas"]
    assert "minAvailable" not in pdb["spec"]


@pytest.mark.parametrize(
    ("subcommand", "source"),
    [("serve", "Deployment"), ("serve", "Dockerfile CMD"), ("run", "CronJob")],
)
def test_entrypoint_args_parse_with_the_cli(
    objects: dict[tuple[str, str], dict[str, Any]], subcommand: str, source: str
) -> None:
    cli = pytest.importorskip("icetail.monitor.cli.main")
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    if subcommand not in subparsers.choices:
        pytest.skip(f"the CLI has no `{subcommand}` subcommand yet")
    args = {
        "Deployment": lambda: container(objects[("Deployment", "icetail")])["args"],
        "Dockerfile CMD": lambda: json.loads(dockerfile()["CMD"]),
        "CronJob": lambda: container(objects[("CronJob", "icetail-batch")])["args"],
    }[source]()
    assert args[0] == subcommand
    parsed = parser.parse_args(args)
    assert parsed.command == subcommand


# --- Dockerfile and .dockerignore ------------------------------------------------------------


def test_dockerfile_matches_the_deployment(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    df = dockerfile()
    text = (ROOT / "Dockerfile").read_text()
    assert df["FROM"] == "${BASE_IMAGE}"  # a build argument whose default is the official base
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and base.group(1).startswith("python:3.11-slim-bookworm")
    assert text.index("ARG BASE_IMAGE=") < text.index("FROM ${BASE_IMAGE}")
    # Java 17 from Debian's JDK, cut down by jlink in a build stage, at the JAVA_HOME Spark reads
    assert "openjdk-17-jdk-headless" in text and "jlink --add-modules" in text
    assert "COPY --from=jre /opt/jre /usr/lib/jvm/java-17" in text
    assert json.loads(df["ENTRYPOINT"]) == ["icetail"]
    cmd = json.loads(df["CMD"])
    assert cmd[0] in SUBCOMMANDS
    assert cmd == container(objects[("Deployment", "icetail")])["args"]
    assert df["EXPOSE"] == str(METRICS_PORT)
    assert re.fullmatch(r"\d+:\d+", df["USER"]), "numeric USER so runAsNonRoot can check it"
    assert json.loads(df["VOLUME"]) == ["/tmp", "/var/lib/icetail"]
    assert "JAVA_HOME=" in text and "SPARK_LOCAL_IP=127.0.0.1" in text
    # dependencies are installed pinned, before the sources are copied
    locked = "pip install --no-deps -r requirements-image.txt"
    assert text.index("COPY pyproject.toml requirements-image.txt ./") < text.index(locked) < text.index("COPY monitor")
    assert text.index("COPY monitor") < text.index("pip install --no-deps .")
    assert text.index("COPY icetail") < text.index("pip install --no-deps .")  # the package the folders link into
    scripts = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^icetail = "icetail\.monitor\.cli\.launch:entry"', scripts, re.M)  # the SIGTERM handler first


def test_the_image_lock_pins_every_runtime_dependency_within_pyproject() -> None:
    """requirements-image.txt pins (==) every dependency of pyproject, of its postgres extra (the
    image serves PostgreSQL state stores) and of the bus sinks' extras, each to a version pyproject accepts."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [line.strip() for line in (ROOT / "requirements-image.txt").read_text().splitlines()]
    pins = {}
    for line in lines:
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    extras = project["optional-dependencies"]
    # the bus sinks' clients too: users run the image, and a sink URL must not need a pip install there
    for raw in project["dependencies"] + extras["postgres"] + extras["nats"] + extras["redis"] + extras["rabbitmq"]:
        requirement = Requirement(raw)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements-image.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} vs {raw}"
    assert {"sqlalchemy", "psycopg-binary", "py4j"} <= set(pins)  # what the extras bring


def test_dockerfile_healthcheck_probes_healthz() -> None:
    df = dockerfile()
    healthcheck = df["HEALTHCHECK"]
    command = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
    assert command[:2] == ["python", "-c"]
    with MonitorServer(Metrics.create().registry, lambda: (False, "not ready")) as server:
        _, port = server.start("127.0.0.1", 0)
        env = {**os.environ, "ICETAIL_METRICS_PORT": str(port)}
        ok = subprocess.run([sys.executable, "-c", command[2]], env=env, capture_output=True, timeout=30)
        assert ok.returncode == 0, ok.stderr  # alive even while not ready
    env = {**os.environ, "ICETAIL_METRICS_PORT": str(port)}  # nothing listens any more
    down = subprocess.run([sys.executable, "-c", command[2]], env=env, capture_output=True, timeout=30)
    assert down.returncode == 1


def test_dockerignore_keeps_what_the_build_copies() -> None:
    patterns = [
        p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")
    ]

    def ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.split("/")[0], p) for p in patterns)

    for needed in (
        "pyproject.toml",
        "requirements-image.txt",
        "README.md",
        "icetail/__init__.py",
        "state/__init__.py",
        "reader/spark/session.py",
        "monitor/cli/main.py",
    ):
        assert not ignored(needed), needed
    for unwanted in (
        ".venv",
        ".venv-demo",
        ".venv-spark4",
        ".wheel-smoke",
        ".git",
        "tests",
        "icetail.egg-info",
        "monitor/__pycache__",
    ):
        assert ignored(unwanted), unwanted


# --- Grafana dashboard ---------------------------------------------------------------------


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    out: list[tuple[str, str]] = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def exported_series() -> set[str]:
    metrics = Metrics.create()
    metrics.register_consumer("db.t", "c")
    metrics.record_success("db.t", "c")
    metrics.set_lag("db.t", "c", snapshots=0, seconds=0, cursor_commit_timestamp_seconds=1.0)
    return {s.name for family in metrics.registry.collect() for s in family.samples}


def test_dashboard_is_valid_and_uses_exported_metrics() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert variables == {"datasource", "table", "consumer"}
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for topic in ("lag", "rows emitted by change type", "batch duration", "failures by stage"):
        assert topic in titles
    series = exported_series()
    queries = dashboard_queries()
    assert len(queries) >= 15
    for title, expr in queries:
        for name in re.findall(r"\bicetail_\w+", expr):
            assert name in series, f"panel {title!r} uses {name}, which monitor.metrics does not export"
        for var in re.findall(r"\$(\w+)", expr):
            assert var in variables or var.startswith("__"), f"panel {title!r} uses undefined ${var}"
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and set(panel["gridPos"]) == {"h", "w", "x", "y"}
            assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail(
            f"the Prometheus server binary is missing at {PROMETHEUS}; install it with `apt-get install prometheus`"
        )
    tmp = tmp_path_factory.mktemp("prometheus")
    (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"Prometheus did not become ready on port {port} (exit code {proc.poll()})")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_dashboard_queries_are_valid_promql(prometheus: int) -> None:
    for title, expr in dashboard_queries():
        promql = expr.replace("$__rate_interval", "1m").replace("$table", ".*").replace("$consumer", ".*")
        url = f"http://127.0.0.1:{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                status = json.load(resp)["status"]
        except urllib.error.HTTPError as err:
            pytest.fail(f"panel {title!r}: {expr!r} is rejected by Prometheus: {err.read().decode()}")
        assert status == "success", (title, expr)


# --- deploy/spark-submit.sh ----------------------------------------------------------------

STUB = """#!/usr/bin/env bash
set -eu
printf '%s\\n' "$@" > "$STUB_OUT/args"
for a in "$@"; do case "$a" in *.zip) cp "$a" "$STUB_OUT/shipped.zip";; esac; done
dirname "$(printf '%s\\n' "$@" | grep '\\.zip$')" > "$STUB_OUT/workdir"
exit "${STUB_EXIT:-0}"
"""


def run_submit(tmp_path: Path, args: list[str], **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    stub = tmp_path / "spark-submit"
    stub.write_text(STUB)
    stub.chmod(0o755)
    full_env = {k: v for k, v in os.environ.items() if k not in ("SPARK_MASTER", "SPARK_SUBMIT_ARGS")}
    full_env.update(SPARK_SUBMIT=str(stub), STUB_OUT=str(tmp_path), TMPDIR=str(tmp_path), **env)
    done = subprocess.run(
        ["bash", str(DEPLOY / "spark-submit.sh"), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    argv = (tmp_path / "args").read_text().splitlines() if (tmp_path / "args").exists() else []
    return done, argv


def test_spark_submit_ships_the_packages_and_passes_args_through(tmp_path: Path) -> None:
    args = ["--catalog", "prod", "--table", "db.events", "--state", "sqlite:////tmp/s.db", "--sink", "x y"]
    done, argv = run_submit(tmp_path, args, SPARK_SUBMIT_ARGS="--conf spark.executor.memory=4g --verbose")
    assert done.returncode == 0, done.stderr
    assert argv[:2] == ["--master", "local[*]"]
    assert argv[argv.index("--py-files") + 1].endswith("/icetail.zip")
    assert argv[argv.index("--conf") + 1] == "spark.executor.memory=4g" and "--verbose" in argv
    entry = argv.index(str(DEPLOY / "icetail_submit.py"))
    assert argv[entry + 1 :] == ["run", "--until-caught-up", *args]
    with zipfile.ZipFile(tmp_path / "shipped.zip") as zf:
        names = set(zf.namelist())
    # every module, laid out as installed: reader/x.py ships as icetail/reader/x.py (tests/support/layout.py)
    assert names == {name for name in installed_files() if name.endswith(".py")}
    # the zip root is an import root: the packages import from it with no site-packages at all
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import icetail.monitor, icetail.reader, icetail.state; "
        "print(icetail.monitor.__file__)"
    )
    where = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(tmp_path / "shipped.zip")], capture_output=True, text=True
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(tmp_path / "shipped.zip" / "icetail" / "monitor" / "__init__.py")
    assert not Path((tmp_path / "workdir").read_text().strip()).exists(), "the temporary zip is removed"


def test_spark_submit_master_leading_run_and_exit_code(tmp_path: Path) -> None:
    done, argv = run_submit(tmp_path, ["run", "--table", "db.t"], SPARK_MASTER="spark://m:7077", STUB_EXIT="3")
    assert done.returncode == 3
    assert argv[:2] == ["--master", "spark://m:7077"]
    assert argv[-4:] == ["run", "--until-caught-up", "--table", "db.t"]


def test_spark_submit_real_spark_imports_icetail_from_the_zip(tmp_path: Path) -> None:
    """Real spark-submit (pyspark's, local mode): the entry script finds monitor.cli in the zip."""
    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.exists() or shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("needs pyspark's spark-submit and a Java runtime")
    env = {
        **os.environ,
        "SPARK_SUBMIT": str(submit),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "TMPDIR": str(tmp_path),
        # an empty PYTHONPATH and a foreign cwd: icetail can come only from --py-files
        "PYTHONPATH": "",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("SPARK_MASTER", None)
    done = subprocess.run(
        ["bash", str(DEPLOY / "spark-submit.sh"), "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert "usage: icetail" in output, output[-3000:]
    assert "No module named" not in output, output[-3000:]


def test_s3_rest_secrets_are_the_ones_the_pods_read(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    """secret-s3-rest.yaml: the OAuth2 credential and the S3 keys land in the variables icetail reads."""
    catalog = objects[("Secret", "icetail-catalog")]["stringData"]
    assert catalog["credential"].count(":") == 1  # CLIENT_ID:CLIENT_SECRET, as pyiceberg splits it
    storage = objects[("Secret", "icetail-storage")]["stringData"]
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} <= set(storage)
    for name in ("Deployment", "CronJob"):
        env = {
            e["name"]: e
            for e in container(objects[(name, "icetail" if name == "Deployment" else "icetail-batch")])["env"]
        }
        ref = env["PYICEBERG_CATALOG__PROD__CREDENTIAL"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("icetail-catalog", "credential"), name
    env_from = container(objects[("Deployment", "icetail")])["envFrom"]
    assert {"secretRef": {"name": "icetail-storage", "optional": True}} in env_from
    assert "secret-s3-rest.yaml" in (DEPLOY / "README.md").read_text()
