"""`make image-smoke`: run the built image the way a cluster runs it, with podman, and check it.

1. The image's own configuration (user, port, volumes, environment, entrypoint, command,
   HEALTHCHECK) is the one deploy/k8s/deployment.yaml relies on.
2. `pip check` inside the image.
3. `icetail --version` and `icetail demo` as uid 10001 with a read-only root filesystem, all
   capabilities dropped, and only the documented writable paths (/tmp, /var/lib/icetail).
4. `serve` with the image's default command, a mounted /etc/icetail, and the Deployment's own
   variables and emptyDir mounts (PYSPARK_SUBMIT_ARGS, spark.local.dir): it follows a table on the
   host (a mounted SQLite catalog and warehouse) into a mounted parquet sink, with its checkpoint
   store in PostgreSQL on the host's loopback; /healthz, /readyz and /metrics answer, the
   image's HEALTHCHECK passes, and `podman stop` (SIGTERM to PID 1) ends it with exit 0 within
   its shutdown timeout. Its JVM maps the class cache the image's build wrote; the time to
   /readyz 200 is printed.
5. `run` once into a parquet sink (the `spark-submit`-style job, as uid 10001, read-only root),
   and once into NATS JetStream on the host (the bus sinks' clients are in the image; NATS on
   127.0.0.1:4222, as on the CI machine): each change one message on the stream.
6. Two `serve` containers on one configuration (two tables, a PostgreSQL store): one is SIGKILLed
   and the other takes its tables over and delivers the rows appended since, each row once.

Runs as root with the project's venv Python (pyiceberg and pyarrow make the host table).
Environment: IMAGE (default icetail:<version>), STORAGE_DRIVER (vfs), PODMAN_RUNTIME (default
runc where cgroups are hybrid, which crun refuses), ICETAIL_SMOKE_PG (postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

ROOT = Path(__file__).resolve().parents[2]
UID = 10001
# the image's class cache folder (the Dockerfile's ICETAIL_JVM_CLASS_CACHE)
CLASS_CACHE = "/opt/icetail/jvm-class-cache"
T = TypeVar("T")


def version() -> str:
    match = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert match
    return match.group(1)


SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "item", StringType()))
IMAGE = os.environ.get("IMAGE") or f"icetail:{version()}"
STORAGE_DRIVER = os.environ.get("STORAGE_DRIVER", "vfs")
PG = os.environ.get("ICETAIL_SMOKE_PG", "postgresql://postgres@127.0.0.1:5432/test")


def runtime_flags() -> list[str]:
    """What podman needs inside a container that is not allowed to raise its own limits and
    mounts cgroup v1 and v2 at once (hybrid): crun stops at `setrlimit RLIMIT_NOFILE: Operation
    not permitted` (podman's default 1048576 open files is above this process's hard limit),
    then at `cgroups in hybrid mode not supported`. runc handles hybrid cgroups; the limits are
    set to what this process may grant."""
    flags = []
    runtime = os.environ.get("PODMAN_RUNTIME")
    if runtime is None and Path("/sys/fs/cgroup/unified").is_dir() and shutil.which("runc"):
        runtime = "runc"
    if runtime:
        flags += ["--runtime", runtime]
    return flags


def limit_flags() -> list[str]:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def podman(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    argv = ["podman", "--storage-driver", STORAGE_DRIVER, *runtime_flags(), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(argv)}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done


def locked_down(workdir: Path) -> list[str]:
    """The Deployment's securityContext and volumes, as podman flags."""
    state = workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    os.chown(state, UID, UID)
    return [
        "--user", f"{UID}:{UID}",
        "--read-only", "--read-only-tmpfs=false",
        "--tmpfs", "/tmp:rw,mode=1777,size=1g",
        "--volume", f"{state}:/var/lib/icetail",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--network", "host",
        *limit_flags(),
    ]  # fmt: skip


def step(name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        def run(*args: Any) -> T:
            started = time.monotonic()
            print(f"--- {name}", flush=True)
            out = fn(*args)
            print(f"    ok ({time.monotonic() - started:.1f}s)", flush=True)
            return out

        return run

    return wrap


@step("image configuration matches deploy/k8s/deployment.yaml")
def check_config() -> None:
    (info,) = json.loads(podman("image", "inspect", IMAGE).stdout)
    config = info["Config"]
    dep = next(d for d in yaml.safe_load_all((ROOT / "deploy/k8s/deployment.yaml").read_text()) if d)
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert config["User"] == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}", config
    (port,) = c["ports"]
    assert f"{port['containerPort']}/tcp" in config["ExposedPorts"], config["ExposedPorts"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert set(config["Volumes"]) <= mounts, (config["Volumes"], mounts)
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PYICEBERG_HOME"] == next(e["value"] for e in c["env"] if e["name"] == "PYICEBERG_HOME")
    assert env["JAVA_HOME"] and env["HOME"] in mounts
    assert config["Entrypoint"] == ["icetail"] and config["Cmd"] == c["args"], (config["Entrypoint"], config["Cmd"])
    health = info.get("Healthcheck") or config.get("Healthcheck")  # podman puts it beside Config
    assert health and "/healthz" in " ".join(health["Test"]), "the HEALTHCHECK is lost (an OCI-format build?)"
    size = int(info["Size"])
    print(f"    image {IMAGE}: {size / 1e9:.2f} GB ({size / 2**30:.2f} GiB), {len(info['RootFS']['Layers'])} layers")


@step("pip check")
def check_pip() -> None:
    done = podman("run", "--rm", "--network", "host", *limit_flags(), "--entrypoint", "pip", IMAGE, "check")
    assert "No broken requirements" in done.stdout, done.stdout


@step("icetail --version and icetail demo: uid 10001, read-only root, /tmp and /var/lib/icetail writable")
def check_version_and_demo(workdir: Path) -> None:
    flags = locked_down(workdir / "demo")
    done = podman("run", "--rm", *flags, IMAGE, "--version")
    assert version() in done.stdout, done.stdout
    done = podman("run", "--rm", *flags, IMAGE, "demo", timeout=900)
    assert done.returncode == 0
    print("    demo: " + done.stdout.strip().splitlines()[-1][:160])


def make_tables(workdir: Path, names: tuple[str, ...] = ("shop.orders",)) -> dict[str, str]:
    """A SQLite pyiceberg catalog and tables of three rows (ids 1-3), under `workdir`."""
    (workdir / "warehouse").mkdir()
    props = {"uri": f"sqlite:///{workdir / 'catalog.db'}", "warehouse": f"file://{workdir / 'warehouse'}"}
    catalog = _catalog(props)
    catalog.create_namespace("shop")
    for name in names:
        catalog.create_table(name, schema=SCHEMA).append(_rows(1, 4))
    return {f"PYICEBERG_CATALOG__SMOKE__{k.upper()}": v for k, v in props.items()}


def append_rows(env: dict[str, str], name: str, first: int, end: int) -> None:
    """Rows with ids `first` (inclusive) to `end` (exclusive) appended to table `name` of the host's catalog."""
    prefix = "PYICEBERG_CATALOG__SMOKE__"
    _catalog({k[len(prefix) :].lower(): v for k, v in env.items()}).load_table(name).append(_rows(first, end))


def _catalog(props: dict[str, str]) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("smoke", **props)


def _rows(first: int, end: int) -> Any:
    import pyarrow as pa

    ids = list(range(first, end))
    return pa.table({"id": ids, "item": [f"item-{i}" for i in ids]}, schema=SCHEMA.as_arrow())


def sink_ids(sink: Path) -> list[int]:
    """The ids of the INSERT rows a parquet sink holds, sorted (a duplicate shows twice)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    rows = ds.dataset(str(sink), format="parquet").to_table()
    inserts = rows.filter(pc.equal(rows["_change_type"], "INSERT"))
    return sorted(inserts["id"].to_pylist())


def committed_ids(sink: Path) -> list[int]:
    """`sink_ids`, or [] while the sink holds no file yet."""
    return sink_ids(sink) if any(sink.glob("*.parquet")) else []


def get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return None


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, name: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        state = podman("inspect", "--format", "{{.State.Running}}", name, check=False).stdout.strip()
        if state != "true":
            raise SystemExit(f"FAILED: the container stopped while waiting for {what}\n{logs(name)}")
        time.sleep(0.5)
    raise SystemExit(f"FAILED: no {what} after {timeout}s\n{logs(name)}")


def logs(name: str) -> str:
    done = podman("logs", name, check=False)
    return (done.stdout + done.stderr)[-6000:]


def deployment_container() -> tuple[dict[str, Any], dict[str, Any]]:
    """The Deployment's container and its pod's volumes by name."""
    dep = next(d for d in yaml.safe_load_all((ROOT / "deploy/k8s/deployment.yaml").read_text()) if d)
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c, {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}


def serve_flags(state_dir: Path, variables: dict[str, str]) -> list[str]:
    """`locked_down`, the Deployment's literal variables (driver heap, spark.local.dir) and its emptyDir
    mounts besides the two locked_down gives (/tmp, and /var/lib/icetail: an emptyDir since the
    replicas' store is PostgreSQL), then `variables`."""
    flags = locked_down(state_dir)
    c, volumes = deployment_container()
    for mount in c["volumeMounts"]:
        if "emptyDir" in volumes[mount["name"]] and mount["mountPath"] not in ("/tmp", "/var/lib/icetail"):
            flags += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777"]
    literal = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert "PYSPARK_SUBMIT_ARGS" in literal, literal
    return flags + [a for k, v in {**literal, **variables}.items() for a in ("--env", f"{k}={v}")]


def write_config(conf: Path, port: int, settings: dict[str, Any]) -> None:
    conf.mkdir()
    base = {"catalog": "smoke", "interval": "1s", "metrics_host": "127.0.0.1", "metrics_port": port}
    (conf / "icetail.yaml").write_text(yaml.safe_dump({**base, **settings}))


def chown_tree(top: Path) -> None:
    for path in [top, *top.rglob("*")]:
        os.chown(path, UID, UID)


def rows_emitted(metrics: str, table: str | None = None) -> float:
    """icetail_rows_emitted_total of INSERT rows in a /metrics text (of `table`, else of all tables)."""
    total = 0.0
    for labels, value in re.findall(r"^icetail_rows_emitted_total\{([^}]*)\} (\S+)$", metrics, re.M):
        if 'change_type="INSERT"' in labels and (table is None or f'table="{table}"' in labels):
            total += float(value)
    return total


def owned(metrics: str) -> set[str]:
    """The tables this replica holds the consumer of (icetail_consumer_owned 1)."""
    found = re.findall(r'^icetail_consumer_owned\{[^}]*table="([^"]+)"[^}]*\} 1\.0$', metrics, re.M)
    return set(found)


def jvm_running(name: str) -> bool:
    """Does a Java process run in the container? (the command names of its processes)"""
    done = podman("exec", name, "sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null", check=False)
    return "java" in done.stdout.split()


def jvm_maps_class_cache(name: str) -> bool:
    """Does a process in the container (its Spark JVM) map an archive of the image's class cache?"""
    done = podman("exec", name, "sh", "-c", f"cat /proc/[0-9]*/maps 2>/dev/null | grep -c {CLASS_CACHE}/", check=False)
    return done.stdout.strip() not in ("", "0")


@step("serve: a host table into a parquet sink, PostgreSQL state, probes, HEALTHCHECK, SIGTERM")
def check_serve(workdir: Path) -> None:
    import psycopg

    data = workdir / "serve"
    data.mkdir()
    env = make_tables(data, ("shop.orders", "shop.big"))
    (data / "sink").mkdir()
    (data / "big").mkdir()
    with socket_port() as port:
        pass
    schema = "icetail_smoke_" + uuid.uuid4().hex[:8]
    shutdown_timeout = 30
    conf = workdir / "conf"
    write_config(conf, port, {
        "state": f"{PG}?schema={schema}",
        "shutdown_timeout": f"{shutdown_timeout}s",
        "tables": [
            {"table": "shop.orders", "consumer": "smoke", "sink": f"parquet://{data / 'sink'}"},
            # every batch of it on Spark, from the snapshot current at the start: Spark starts on need
            {"table": "shop.big", "consumer": "smoke-big", "sink": f"parquet://{data / 'big'}",
             "engine": "spark", "start": "latest"},
        ],
    })  # fmt: skip
    chown_tree(data)
    name = "icetail-smoke-" + uuid.uuid4().hex[:8]
    flags = serve_flags(workdir / "serve-state", {**env, "ICETAIL_METRICS_PORT": str(port)})
    podman(
        "run", "-d", "--name", name, *flags, "--volume", f"{conf}:/etc/icetail:ro", "--volume", f"{data}:{data}", IMAGE
    )
    try:
        started = time.monotonic()
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: (r := get(base + "/healthz")) and r[0] == 200, 120, "/healthz 200", name)
        wait_for(lambda: (r := get(base + "/readyz")) and r[0] == 200, 180, "/readyz 200", name)
        ready_after = time.monotonic() - started
        startup = deployment_container()[0]["startupProbe"]
        budget = startup["periodSeconds"] * startup["failureThreshold"]
        print(f"    /readyz 200 after {ready_after:.1f}s (the Deployment's startup probe allows {budget}s)")

        def delivered() -> str | None:
            reply = get(base + "/metrics")
            return reply[1] if reply and rows_emitted(reply[1]) == 3 else None

        metrics = wait_for(delivered, 120, "3 INSERT rows in /metrics", name)
        assert "icetail_build_info" in metrics and "process_resident_memory_bytes" in metrics
        assert sink_ids(data / "sink") == [1, 2, 3], sink_ids(data / "sink")
        assert not jvm_running(name), f"a JVM runs although every batch was small\n{logs(name)}"
        print("    ready and delivering with no JVM (small batches read in process)")
        append_rows(env, "shop.big", 10, 13)  # a batch of the table on Spark: the session starts now
        wait_for(lambda: committed_ids(data / "big") == [10, 11, 12], 300, "shop.big's rows, read on Spark", name)
        assert jvm_maps_class_cache(name), f"the Spark JVM maps nothing from {CLASS_CACHE}\n{logs(name)}"
        print(f"    a batch on Spark started the session; its JVM maps the image's class cache ({CLASS_CACHE})")
        with psycopg.connect(PG) as conn:
            tables = conn.execute(
                "select count(*) from information_schema.tables where table_schema = %s", (schema,)
            ).fetchone()
            assert tables and tables[0] > 0, f"no checkpoint tables in schema {schema}"
        check = podman("healthcheck", "run", name, check=False)
        if check.returncode != 0:  # no systemd timers here: run the HEALTHCHECK command itself
            (info,) = json.loads(podman("image", "inspect", IMAGE).stdout)
            test = (info.get("Healthcheck") or info["Config"]["Healthcheck"])["Test"]
            assert test[0] == "CMD", test
            check = podman("exec", name, *test[1:], check=False)
        assert check.returncode == 0, check.stdout + check.stderr

        stop_started = time.monotonic()
        podman("stop", "--time", str(shutdown_timeout + 30), name)
        stopped_in = time.monotonic() - stop_started
        code = int(podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip())
        print(f"    SIGTERM: exit {code} after {stopped_in:.1f}s (shutdown timeout {shutdown_timeout}s)")
        assert code == 0, f"exit code {code} after SIGTERM\n{logs(name)}"
        assert stopped_in < shutdown_timeout, f"took {stopped_in:.1f}s to stop\n{logs(name)}"
    finally:
        podman("rm", "-f", name, check=False)
        drop_schema(schema)


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'drop schema if exists "{schema}" cascade')


@step("run: one pass into a parquet sink, uid 10001, read-only root")
def check_run(workdir: Path) -> None:
    data = workdir / "run"
    data.mkdir()
    env = make_tables(data)
    chown_tree(data)
    flags = locked_down(workdir / "run-state")
    env_flags = [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
    done = podman(
        "run", "--rm", *flags, *env_flags, "--volume", f"{data}:{data}", IMAGE,
        "run", "--catalog", "smoke", "--table", "shop.orders", "--state", "sqlite:////var/lib/icetail/state.db",
        "--sink", f"parquet://{data / 'sink'}",
        timeout=600,
    )  # fmt: skip
    assert sink_ids(data / "sink") == [1, 2, 3], (sink_ids(data / "sink"), done.stderr[-2000:])
    print("    " + (done.stderr.strip().splitlines() or ["(no output)"])[-1][:160])


@step("run into NATS JetStream on the host: the bus sinks' clients are in the image")
def check_run_into_nats(workdir: Path) -> None:
    data = workdir / "run-nats"
    data.mkdir()
    env = make_tables(data)
    chown_tree(data)
    stream = "ICETAIL_SMOKE_" + uuid.uuid4().hex[:8].upper()
    flags = locked_down(workdir / "run-nats-state")
    env_flags = [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
    try:
        done = podman(
            "run", "--rm", *flags, *env_flags, "--volume", f"{data}:{data}", IMAGE,
            "run", "--catalog", "smoke", "--table", "shop.orders", "--state", "sqlite:////var/lib/icetail/state.db",
            "--sink", f"nats://127.0.0.1:4222/smoke?stream={stream}&create=true",
            timeout=600,
        )  # fmt: skip
        assert nats_messages(stream) == 3, done.stderr[-2000:]
    finally:
        nats_messages(stream, delete=True)
    print("    " + (done.stderr.strip().splitlines() or ["(no output)"])[-1][:160])
    podman("run", "--rm", *limit_flags(), "--entrypoint", "python", IMAGE, "-c", "import nats, redis, rstream")


def nats_messages(stream: str, *, delete: bool = False) -> int:
    """Messages on a JetStream stream of the host's NATS (0 when it does not exist); `delete`: remove it."""
    import asyncio

    import nats
    from nats.js.errors import NotFoundError

    async def ask() -> int:
        connection = await nats.connect("nats://127.0.0.1:4222", connect_timeout=5)
        try:
            js = connection.jetstream()
            try:
                count = int((await js.stream_info(stream)).state.messages)
            except NotFoundError:
                return 0
            if delete:
                await js.delete_stream(stream)
            return count
        finally:
            await connection.close()

    return asyncio.run(ask())


@step("two serve replicas on one configuration: one SIGKILLed, its tables taken over, each row once")
def check_replicas(workdir: Path) -> None:
    data = workdir / "replicas"
    data.mkdir()
    tables = ("shop.orders", "shop.refunds")
    env = make_tables(data, tables)
    schema = "icetail_smoke_" + uuid.uuid4().hex[:8]
    sinks = {t: data / "sink" / t for t in tables}
    for sink in sinks.values():
        sink.mkdir(parents=True)
    chown_tree(data)
    names, ports = [], []
    try:
        for i in range(2):
            with socket_port() as port:
                pass
            conf = workdir / f"replica-conf-{i}"
            write_config(conf, port, {
                "state": f"{PG}?schema={schema}",
                "lease_ttl": "6s",
                "tables": [
                    {"table": t, "consumer": "smoke-" + t.split(".")[1], "sink": f"parquet://{sinks[t]}"}
                    for t in tables
                ],
            })  # fmt: skip
            name = f"icetail-smoke-replica{i}-" + uuid.uuid4().hex[:8]
            flags = serve_flags(workdir / f"replica-state-{i}", {**env, "ICETAIL_METRICS_PORT": str(port)})
            podman("run", "-d", "--name", name, *flags, "--volume", f"{conf}:/etc/icetail:ro",
                   "--volume", f"{data}:{data}", IMAGE)  # fmt: skip
            names.append(name)
            ports.append(port)

        def metrics(i: int) -> str:
            reply = get(f"http://127.0.0.1:{ports[i]}/metrics")
            return reply[1] if reply else ""

        def all_delivered(expected: float, among: list[int]) -> bool:
            return sum(rows_emitted(metrics(i)) for i in among) >= expected

        for i, name in enumerate(names):
            wait_for(
                lambda i=i: (r := get(f"http://127.0.0.1:{ports[i]}/readyz")) and r[0] == 200, 180, "/readyz", name
            )
        wait_for(lambda: all_delivered(6, [0, 1]), 180, "6 INSERT rows in both replicas' /metrics", names[0])
        holdings = [owned(metrics(i)) for i in range(2)]
        victim = 0 if holdings[0] else 1
        survivor = 1 - victim
        print(f"    replica {victim} holds {sorted(holdings[victim])}, replica {survivor} {sorted(holdings[survivor])}")
        podman("kill", "--signal", "KILL", names[victim])
        for t in tables:
            append_rows(env, t, 4, 6)
        killed_at = time.monotonic()

        def taken_over() -> str | None:
            text = metrics(survivor)
            return (
                text
                if owned(text) == set(tables) and all(sink_ids(s) == [1, 2, 3, 4, 5] for s in sinks.values())
                else None
            )

        wait_for(taken_over, 180, "the survivor holding both tables and delivering rows 4-5", names[survivor])
        print(
            f"    the survivor holds both tables, rows 4-5 delivered {time.monotonic() - killed_at:.1f}s after the kill"
        )
        for t in tables:
            assert sink_ids(sinks[t]) == [1, 2, 3, 4, 5], (t, sink_ids(sinks[t]))
    finally:
        for name in names:
            podman("rm", "-f", name, check=False)
        drop_schema(schema)


class socket_port:
    """A free TCP port on the host's loopback (the container shares the host's network)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def main() -> int:
    if os.geteuid() != 0:
        print("image smoke: run as root (rootful podman, chown to uid 10001)", file=sys.stderr)
        return 2
    if shutil.which("podman") is None:
        print("image smoke: podman is missing (apt-get install podman runc)", file=sys.stderr)
        return 2
    started = time.monotonic()
    # a world-traversable directory: the container's uid 10001 reaches the mounted paths under it
    workdir = Path(tempfile.mkdtemp(prefix="icetail-image-smoke-", dir="/var/tmp"))
    workdir.chmod(0o755)
    try:
        check_config()
        check_pip()
        check_version_and_demo(workdir)
        check_serve(workdir)
        check_run(workdir)
        check_run_into_nats(workdir)
        check_replicas(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"image smoke passed: {IMAGE} in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
