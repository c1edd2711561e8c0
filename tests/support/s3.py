"""A real S3-compatible server (moto's `moto_server` process) on 127.0.0.1, and catalogs on it.

* `MotoServer.start()` runs `moto_server` on a free loopback port and returns once its HTTP
  endpoint answers (polled, no fixed sleep); `stop()` ends that process only.
* `S3Catalog` - a pyiceberg SQL catalog (SQLite file, local) whose warehouse is `s3://BUCKET/...`
  on that server, configured with pyiceberg's `s3.*` FileIO properties; `env()` gives the
  `PYICEBERG_CATALOG__<NAME>__*` variables a child process resolves it with, `aws_env()` the
  standard AWS variables (for the `parquet+s3://` sink and pyarrow's S3FileSystem).

The secret access key is distinctive per test session, so tests can grep everything they
captured for it. moto accepts any key pair.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

REGION = "us-east-1"
ACCESS_KEY_ID = "icetailtestkeyid"
# distinctive: appears nowhere unless a secret leaked
SECRET_ACCESS_KEY = f"icetail-SECRET-{uuid.uuid4().hex}"
START_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _moto_command() -> list[str]:
    script = Path(sys.executable).with_name("moto_server")
    if script.exists():
        return [str(script)]
    found = shutil.which("moto_server")
    if found:
        return [found]
    return [sys.executable, "-m", "moto.server"]


@dataclass
class MotoServer:
    """One `moto_server` process listening on 127.0.0.1:`port`."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, log_dir: Path, env: dict[str, str] | None = None) -> MotoServer:
        """Start moto_server on a free port; wait until it answers HTTP (retried on a port race).

        `env`: extra variables for the server, e.g. INITIAL_NO_AUTH_ACTION_COUNT=0, with which
        moto checks credentials and refuses every request signed by a key it does not know.
        """
        last_error = ""
        for attempt in range(3):
            port = _free_port()
            log_path = log_dir / f"moto-{port}.log"
            log = open(log_path, "wb")  # noqa: SIM115 - the child owns it until stop()
            process = subprocess.Popen(
                [*_moto_command(), "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
            log.close()
            server = cls(port, process, log_path)
            if server._wait_ready():
                return server
            server.stop()
            last_error = log_path.read_text(errors="replace")[-2000:]
            if attempt == 2:
                break
        raise RuntimeError(f"moto_server did not start; its output:\n{last_error}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False  # exited: the port was taken, or moto is broken
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.05)  # poll interval only: readiness is decided by the HTTP answer
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def fs(self, **options: object):  # type: ignore[no-untyped-def]
        """A pyarrow S3FileSystem on this server with the test credentials."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=ACCESS_KEY_ID,
            secret_key=SECRET_ACCESS_KEY,
            endpoint_override=self.endpoint,
            region=REGION,
            scheme="http",
            **options,
        )

    def create_bucket(self, bucket: str) -> None:
        self.fs(allow_bucket_creation=True).create_dir(bucket)

    def aws_env(self) -> dict[str, str]:
        """The standard AWS variables: what a user sets for pyarrow/boto against this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }


@dataclass(frozen=True)
class S3Catalog:
    """A pyiceberg SQL catalog on a local SQLite file whose warehouse is on the moto server."""

    name: str
    root: Path
    server: MotoServer
    bucket: str

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root}/catalog.db"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/warehouse"

    def properties(self) -> dict[str, str]:
        return {
            "uri": self.uri,
            "warehouse": self.warehouse,
            "s3.endpoint": self.server.endpoint,
            "s3.access-key-id": ACCESS_KEY_ID,
            "s3.secret-access-key": SECRET_ACCESS_KEY,
            "s3.region": REGION,
        }

    def env(self) -> dict[str, str]:
        """PYICEBERG_CATALOG__<NAME>__* (`__` -> `.`, `_` -> `-` in pyiceberg's reading)."""
        key = self.name.upper()
        out = {f"PYICEBERG_CATALOG__{key}__TYPE": "sql"}
        for prop, value in self.properties().items():
            out[f"PYICEBERG_CATALOG__{key}__{prop.replace('.', '__').replace('-', '_').upper()}"] = value
        return out

    def catalog(self) -> SqlCatalog:
        return SqlCatalog(self.name, **self.properties())

    def load(self, ident: str) -> Table:
        return self.catalog().load_table(ident)

    def try_load(self, ident: str) -> Table | None:
        try:
            return self.load(ident)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None


def new_s3_catalog(server: MotoServer, root: Path, name: str) -> S3Catalog:
    """A fresh bucket (named after the catalog and a random suffix) and a catalog over it."""
    if not name.isalnum() or name.lower() != name:
        raise ValueError(f"catalog name {name!r}: lower-case letters and digits only (pyiceberg env naming)")
    bucket = f"{name}-{uuid.uuid4().hex[:10]}"
    server.create_bucket(bucket)
    root.mkdir(parents=True, exist_ok=True)
    cat = S3Catalog(name, root.resolve(), server, bucket)
    cat.catalog()  # creates the catalog tables
    return cat


@contextlib.contextmanager
def moto_server(log_dir: Path, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    server = MotoServer.start(log_dir, env)
    try:
        yield server
    finally:
        server.stop()


def s3_env_clean() -> dict[str, str]:
    """This process's environment without AWS_* variables that would point pyarrow elsewhere."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
