"""Test fixture: an Iceberg REST catalog server over a pyiceberg SQL catalog, with vended credentials.

No real REST catalog server is a registry package runnable here without Docker (Polaris,
Lakekeeper, Gravitino, Nessie, Unity and Iceberg's own `iceberg-rest-fixture` ship as
containers or JVM/Rust distributions; PyPI's `apache-polaris` is Polaris' CLI client only), so
this fixture serves the subset of the Iceberg REST OpenAPI spec that pyiceberg's `RestCatalog`
uses, over real HTTP on 127.0.0.1 (stdlib `http.server`, one thread per request):

* `POST /v1/oauth/tokens`: OAuth2 client credentials (`grant_type=client_credentials`,
  `client_id`, `client_secret`) -> a random bearer token; every other route needs one.
* `GET /v1/config` -> `overrides.prefix` (routes below are under `/v1/{prefix}/`), `endpoints`.
* namespaces: list, create, load, exists; tables: list, create, load, exists, commit, drop.
* `LoadTableResult`: with `X-Iceberg-Access-Delegation: vended-credentials`, temporary S3
  credentials (access key id, secret, session token) from STS `AssumeRole` on the checking S3
  server, in `config` or as `storage-credentials` for the table's location (`vending`); never
  anything of the catalog's own.

`CheckingS3` is the storage side: a `moto_server` whose IAM users, roles and policies are set up
first and which then checks every request's signature and permissions (moto's reset-auth), so
only credentials the fixture vends (or its own admin key, which stays in the test process) can
read or write. `rotate()` revokes the role behind everything vended so far and vends from a new
one: old keys get AccessDenied from then on.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import CommitTableRequest, Table

from tests.support.s3 import REGION, MotoServer

ACCOUNT = "123456789012"  # moto's default account
PREFIX = "icetail-test"  # the catalog's `prefix`: Polaris-style routes /v1/{prefix}/...
_ALLOW_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
_ALLOW_S3 = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
}


@dataclass(frozen=True)
class S3Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:  # tests print these objects in assertion messages
        return f"S3Credentials(access_key_id={self.access_key_id!r}, ...)"

    def fileio(self) -> dict[str, str]:
        """pyiceberg's FileIO property names."""
        out = {"s3.access-key-id": self.access_key_id, "s3.secret-access-key": self.secret_access_key}
        if self.session_token:
            out["s3.session-token"] = self.session_token
        return out


@dataclass
class CheckingS3:
    """A moto_server that checks credentials; an admin key; a role whose temporary keys are vended."""

    server: MotoServer
    admin: S3Credentials
    generation: int = 1
    vended: list[S3Credentials] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def setup(cls, server: MotoServer) -> CheckingS3:
        """IAM setup while moto still lets everything through, then switch its checks on."""
        boot = S3Credentials("bootstrap", "bootstrap")
        iam = _client("iam", server, boot)
        iam.create_user(UserName="catalog")
        iam.put_user_policy(UserName="catalog", PolicyName="all", PolicyDocument=json.dumps(_ALLOW_ALL))
        key = iam.create_access_key(UserName="catalog")["AccessKey"]
        store = cls(server, S3Credentials(key["AccessKeyId"], key["SecretAccessKey"]))
        store._create_role(1, iam)
        request = urllib.request.Request(
            f"{server.endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        return store

    def _create_role(self, generation: int, iam: Any) -> None:
        name = f"vended-{generation}"
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(_TRUST))
        iam.put_role_policy(RoleName=name, PolicyName="s3", PolicyDocument=json.dumps(_ALLOW_S3))

    def vend(self) -> S3Credentials:
        """Fresh temporary credentials (STS AssumeRole) of the current role."""
        with self._lock:
            sts = _client("sts", self.server, self.admin)
            role = f"arn:aws:iam::{ACCOUNT}:role/vended-{self.generation}"
            got = sts.assume_role(RoleArn=role, RoleSessionName="icetail-test", DurationSeconds=900)["Credentials"]
            creds = S3Credentials(got["AccessKeyId"], got["SecretAccessKey"], got["SessionToken"])
            self.vended.append(creds)
            return creds

    def rotate(self) -> None:
        """Revoke every credential vended so far (the role loses its policy); vend from a new role."""
        with self._lock:
            iam = _client("iam", self.server, self.admin)
            self._create_role(self.generation + 1, iam)
            iam.delete_role_policy(RoleName=f"vended-{self.generation}", PolicyName="s3")
            self.generation += 1

    def fs(self, creds: S3Credentials | None = None, **options: Any) -> Any:
        from pyarrow import fs

        creds = creds or self.admin
        return fs.S3FileSystem(
            access_key=creds.access_key_id,
            secret_key=creds.secret_access_key,
            session_token=creds.session_token,
            endpoint_override=self.server.endpoint,
            region=REGION,
            scheme="http",
            **options,
        )

    def create_bucket(self, bucket: str) -> None:
        self.fs(allow_bucket_creation=True).create_dir(bucket)


def _client(service: str, server: MotoServer, creds: S3Credentials) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=server.endpoint,
        region_name=REGION,
        aws_access_key_id=creds.access_key_id,
        aws_secret_access_key=creds.secret_access_key,
        aws_session_token=creds.session_token,
    )


class _Error(Exception):
    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code, self.kind, self.message = code, kind, message


@dataclass
class RestCatalogFixture:
    """The REST catalog server (a test fixture): start(), the client's properties, stop()."""

    name: str
    root: Path
    store: CheckingS3
    bucket: str
    vending: str = "config"  # or "storage-credentials"
    client_id: str = "icetail-client"
    client_secret: str = field(default_factory=lambda: f"icetail-CLIENT-SECRET-{uuid.uuid4().hex}")
    tokens: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, delegation
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- the backing catalog ------------------------------------------------------------
    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/warehouse"

    def backing(self) -> SqlCatalog:
        """The SQL catalog the server keeps its tables in (SQLite; the admin key on S3)."""
        return SqlCatalog(
            f"{self.name}-backing",
            uri=f"sqlite:///{self.root}/rest-backing.db",
            warehouse=self.warehouse,
            **{
                "s3.endpoint": self.store.server.endpoint,
                "s3.region": REGION,
                **self.store.admin.fileio(),
            },
        )

    # --- the client's view --------------------------------------------------------------
    @property
    def uri(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def properties(self) -> dict[str, str]:
        """What a user configures: the URI and the OAuth2 client; no storage credentials."""
        return {
            "type": "rest",
            "uri": self.uri,
            "credential": f"{self.client_id}:{self.client_secret}",
            "oauth2-server-uri": f"{self.uri}/v1/oauth/tokens",
            "scope": "PRINCIPAL_ROLE:ALL",
        }

    def env(self) -> dict[str, str]:
        key = self.name.upper()
        return {
            f"PYICEBERG_CATALOG__{key}__{prop.replace('.', '__').replace('-', '_').upper()}": value
            for prop, value in self.properties().items()
        }

    def catalog(self) -> Any:
        from pyiceberg.catalog.rest import RestCatalog

        props = self.properties()
        props.pop("type")
        return RestCatalog(self.name, **props)

    def load(self, ident: str) -> Table:
        return self.catalog().load_table(ident)

    def try_load(self, ident: str) -> Table | None:
        try:
            return self.load(ident)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def secrets(self) -> list[str]:
        """Everything secret this fixture handed out: the client secret, tokens, vended keys."""
        out = [self.client_secret, *self.tokens, self.store.admin.secret_access_key]
        for creds in self.store.vended:
            out += [creds.secret_access_key, creds.session_token or ""]
        return [s for s in out if s]

    # --- the server ---------------------------------------------------------------------
    def start(self) -> RestCatalogFixture:
        self.root.mkdir(parents=True, exist_ok=True)
        self.backing()  # creates the catalog's SQL tables
        fixture = self

        class Handler(_Handler):
            catalog_fixture = fixture

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="rest-catalog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    # --- routes ---------------------------------------------------------------------------
    def _token(self, form: dict[str, str]) -> dict[str, Any]:
        if form.get("grant_type") != "client_credentials":
            raise _Error(400, "unsupported_grant_type", "only client_credentials")
        if (form.get("client_id"), form.get("client_secret")) != (self.client_id, self.client_secret):
            raise _Error(401, "invalid_client", "unknown client or wrong secret")
        token = secrets.token_urlsafe(24)
        with self._lock:
            self.tokens.add(token)
        return {
            "access_token": token,
            "token_type": "bearer",
            "expires_in": 3600,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }

    def _config(self) -> dict[str, Any]:
        endpoints = [
            "GET /v1/{prefix}/namespaces",
            "POST /v1/{prefix}/namespaces",
            "GET /v1/{prefix}/namespaces/{namespace}",
            "HEAD /v1/{prefix}/namespaces/{namespace}",
            "GET /v1/{prefix}/namespaces/{namespace}/tables",
            "POST /v1/{prefix}/namespaces/{namespace}/tables",
            "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        ]
        return {"defaults": {}, "overrides": {"prefix": PREFIX}, "endpoints": endpoints}

    def _load_result(self, table: Table, delegation: str | None) -> str:
        """LoadTableResult: metadata, config (endpoint, region; vended keys), storage-credentials."""
        config = {"s3.endpoint": self.store.server.endpoint, "s3.region": REGION}
        credentials: list[dict[str, Any]] = []
        if delegation and "vended-credentials" in delegation:
            vended = self.store.vend().fileio()
            if self.vending == "config":
                config.update(vended)
            else:
                credentials.append({"prefix": table.metadata.location, "config": vended})
        return (
            f'{{"metadata-location": {json.dumps(table.metadata_location)}, '
            f'"metadata": {table.metadata.model_dump_json()}, "config": {json.dumps(config)}, '
            f'"storage-credentials": {json.dumps(credentials)}}}'
        )

    def route(self, method: str, path: str, body: bytes, headers: Any) -> tuple[int, str]:
        """(status, JSON body) for one request; errors as the spec's ErrorModel."""
        delegation = headers.get("X-Iceberg-Access-Delegation")
        with self._lock:
            self.requests.append((method, path, delegation))
        parsed = urllib.parse.urlsplit(path)
        parts = [urllib.parse.unquote(p) for p in parsed.path.strip("/").split("/")]
        if method == "POST" and parts == ["v1", "oauth", "tokens"]:
            form = dict(urllib.parse.parse_qsl(body.decode()))
            return 200, json.dumps(self._token(form))
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth.removeprefix("Bearer ") not in self.tokens:
            raise _Error(401, "NotAuthorizedException", "missing or unknown bearer token")
        if method == "GET" and parts == ["v1", "config"]:
            return 200, json.dumps(self._config())
        if parts[:2] != ["v1", PREFIX]:
            raise _Error(404, "NoSuchRouteException", f"no route {parsed.path}")
        return self._catalog_route(method, parts[2:], body, delegation, urllib.parse.parse_qs(parsed.query))

    def _catalog_route(
        self, method: str, parts: list[str], body: bytes, delegation: str | None, query: dict[str, list[str]]
    ) -> tuple[int, str]:
        catalog = self.backing()
        if parts == ["namespaces"] and method == "GET":
            parent = tuple(query.get("parent", [""])[0].split("\x1f")) if "parent" in query else ()
            return 200, json.dumps({"namespaces": [list(ns) for ns in catalog.list_namespaces(parent)]})
        if parts == ["namespaces"] and method == "POST":
            request = json.loads(body)
            catalog.create_namespace(tuple(request["namespace"]), request.get("properties") or {})
            return 200, json.dumps(request)
        if len(parts) < 2 or parts[0] != "namespaces":
            raise _Error(404, "NoSuchRouteException", f"no route {'/'.join(parts)}")
        namespace = tuple(parts[1].split("\x1f"))
        rest = parts[2:]
        if not rest and method in ("GET", "HEAD"):
            props = catalog.load_namespace_properties(namespace)
            return 200, json.dumps({"namespace": list(namespace), "properties": props})
        if rest == ["tables"] and method == "GET":
            idents = [{"namespace": list(t[:-1]), "name": t[-1]} for t in catalog.list_tables(namespace)]
            return 200, json.dumps({"identifiers": idents})
        if rest == ["tables"] and method == "POST":
            fields = {"location": None, "partition-spec": None, "write-order": None, **json.loads(body)}
            create = CreateTableRequest.model_validate(fields)  # optional in the spec, not in the model
            if create.stage_create:
                raise _Error(400, "BadRequestException", "staged creates are not supported by this fixture")
            table = catalog.create_table(
                (*namespace, create.name),
                schema=create.table_schema,
                location=create.location,
                partition_spec=create.partition_spec or _unpartitioned(),
                sort_order=create.write_order or _unsorted(),
                properties=create.properties,
            )
            return 200, self._load_result(table, delegation)
        if len(rest) == 2 and rest[0] == "tables":
            ident = (*namespace, rest[1])
            if method == "HEAD":
                catalog.load_table(ident)
                return 204, ""
            if method == "GET":
                return 200, self._load_result(catalog.load_table(ident), delegation)
            if method == "POST":
                commit = CommitTableRequest.model_validate_json(body)
                response = catalog.commit_table(catalog.load_table(ident), commit.requirements, commit.updates)
                return 200, response.model_dump_json()
            if method == "DELETE":
                catalog.drop_table(ident)
                return 204, ""
        raise _Error(404, "NoSuchRouteException", f"no route {method} {'/'.join(parts)}")


def _unpartitioned() -> Any:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    return UNPARTITIONED_PARTITION_SPEC


def _unsorted() -> Any:
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    return UNSORTED_SORT_ORDER


_ERRORS: list[tuple[type[BaseException], int, str]] = [
    (NoSuchTableError, 404, "NoSuchTableException"),
    (NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (CommitFailedException, 409, "CommitFailedException"),
]


class _Handler(BaseHTTPRequestHandler):
    catalog_fixture: RestCatalogFixture
    protocol_version = "HTTP/1.1"

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            status, text = self.catalog_fixture.route(method, self.path, body, self.headers)
        except _Error as exc:
            status, text = exc.code, self._error_body(exc)
        except Exception as exc:  # noqa: BLE001 - every failure answers as the spec's ErrorModel
            status, kind = next(((code, kind) for t, code, kind in _ERRORS if isinstance(exc, t)), (500, "ServerError"))
            text = self._error_body(_Error(status, kind, f"{type(exc).__name__}: {exc}"))
        payload = b"" if method == "HEAD" or status == 204 else text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    @staticmethod
    def _error_body(exc: _Error) -> str:
        if exc.kind.islower():  # OAuth2's TokenErrorResponse
            return json.dumps({"error": exc.kind, "error_description": exc.message})
        return json.dumps({"error": {"message": exc.message, "type": exc.kind, "code": exc.code}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._serve("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: requests are recorded
        return


def iter_secrets_in(data: bytes, secrets_: list[str]) -> Iterator[str]:
    """The secrets (by their first 12 characters, never whole) that occur in `data`."""
    for secret in secrets_:
        if secret.encode() in data:
            yield secret[:12] + "..."


_NAME = re.compile(r"^[a-z0-9]+$")


def new_rest_catalog(store: CheckingS3, root: Path, name: str, *, vending: str = "config") -> RestCatalogFixture:
    """A fresh bucket on the checking S3 server and a started REST catalog fixture over it."""
    if not _NAME.match(name):
        raise ValueError(f"catalog name {name!r}: lower-case letters and digits only (pyiceberg env naming)")
    bucket = f"{name}-{uuid.uuid4().hex[:10]}"
    store.create_bucket(bucket)
    return RestCatalogFixture(name, root.resolve(), store, bucket, vending=vending).start()
