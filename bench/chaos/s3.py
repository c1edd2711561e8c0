"""The S3 server of the S3 sinks: one `moto_server` for the whole harness run (started on first use),
a bucket per trial; `icetail run` reaches it through the trial's proxy (to stop, slow or throttle),
the harness reads it directly."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from tests.support.s3 import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, MotoServer

_server: MotoServer | None = None
_starting = threading.Lock()  # two trials at a time (--jobs 2) share one server


def moto(log_dir: Path) -> MotoServer:
    global _server
    with _starting:
        if _server is None or _server.process.poll() is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            _server = MotoServer.start(log_dir)
        return _server


def close_moto() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None


def new_bucket(server: MotoServer) -> str:
    name = f"chaos-{uuid.uuid4().hex[:12]}"
    server.create_bucket(name)
    return name


def aws_env(endpoint: str) -> dict[str, str]:
    """The standard AWS variables a user sets, pointing at `endpoint` (the proxy)."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
