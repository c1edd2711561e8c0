"""The container's first `serve` start to /readyz 200, with the image's JVM class cache and without it.

    sudo .venv-spark4/bin/python -m bench.image_start [--rounds 3]

Runs the built image (IMAGE, default icetail:<version>) as `make image-smoke` runs it (podman, uid
10001, read-only root, the Deployment's variables, a PostgreSQL store on the host) following one
small table, alternating rounds with the class cache (the image's default) and with
ICETAIL_JVM_CLASS_CACHE=off, each a fresh container (its first start). Prints each round's seconds
to make the container (`podman run -d`), then from its start to /readyz 200 and to the table's 3
rows delivered, and the JSON of all rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _smoke() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_smoke", ROOT / "deploy" / "image" / "smoke.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_start(smoke: ModuleType, workdir: Path, cache: bool) -> dict[str, Any]:
    data = workdir / uuid.uuid4().hex[:8]
    data.mkdir()
    env = smoke.make_tables(data)
    (data / "sink").mkdir()
    with smoke.socket_port() as port:
        pass
    schema = "icetail_bench_" + uuid.uuid4().hex[:8]
    conf = data / "conf"
    smoke.write_config(conf, port, {
        "state": f"{smoke.PG}?schema={schema}",
        "tables": [{"table": "shop.orders", "consumer": "bench", "sink": f"parquet://{data / 'sink'}"}],
    })  # fmt: skip
    smoke.chown_tree(data)
    variables = {**env, "ICETAIL_METRICS_PORT": str(port)}
    if not cache:
        variables["ICETAIL_JVM_CLASS_CACHE"] = "off"
    name = "icetail-bench-" + uuid.uuid4().hex[:8]
    flags = smoke.serve_flags(data / "state", variables)
    base = f"http://127.0.0.1:{port}"
    created = time.monotonic()
    smoke.podman("run", "-d", "--name", name, *flags, "--volume", f"{conf}:/etc/icetail:ro",
                 "--volume", f"{data}:{data}", smoke.IMAGE)  # fmt: skip
    started = time.monotonic()  # `podman run -d` returns once the container's process runs
    try:
        smoke.wait_for(lambda: (r := smoke.get(base + "/readyz")) and r[0] == 200, 300, "/readyz 200", name)
        ready = time.monotonic() - started
        smoke.wait_for(
            lambda: (r := smoke.get(base + "/metrics")) and smoke.rows_emitted(r[1]) == 3, 300, "3 rows", name
        )
        delivered = time.monotonic() - started
        maps = smoke.jvm_maps_class_cache(name)
    finally:
        smoke.podman("rm", "-f", name, check=False)
        smoke.drop_schema(schema)
    return {
        "class_cache": cache,
        "podman_run_s": round(started - created, 2),  # making the container (vfs: a copy of the image)
        "ready_s": round(ready, 2),  # from its process's start to /readyz 200
        "delivered_s": round(delivered, 2),  # to the table's 3 rows delivered
        "maps_cache": maps,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind, alternated")
    args = parser.parse_args()
    smoke = _smoke()
    workdir = Path(tempfile.mkdtemp(prefix="icetail-bench-image-", dir="/var/tmp"))
    workdir.chmod(0o755)
    rounds = []
    for _ in range(args.rounds):
        for cache in (True, False):
            result = one_start(smoke, workdir, cache)
            print(result, flush=True)
            rounds.append(result)
    print(json.dumps({"image": smoke.IMAGE, "rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
