"""Storage tests: a real S3-compatible server (moto_server) on 127.0.0.1 for the whole session.

* `moto` (session): the `tests.support.s3.MotoServer`; its log goes to the session's tmp dir.
* `s3_catalog` (function): a `tests.support.s3.S3Catalog` - a pyiceberg SQL catalog on SQLite in
  tmp_path whose warehouse is `s3://<fresh bucket>/warehouse` on that server, resolvable by name
  in this process (its `PYICEBERG_CATALOG__S3CAT__*` variables are set for the test).
* `checking_s3` (session): a moto_server that enforces IAM credentials (tests.support.rest_catalog).
* `rest_catalog` (function): the Iceberg REST catalog test fixture on it, as catalog `restcat`.

The SparkSession is the suite's one session (`spark` in tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.catalogs import catalogs_in_process
from tests.support.rest_catalog import CheckingS3, RestCatalogFixture, new_rest_catalog
from tests.support.s3 import MotoServer, S3Catalog, moto_server, new_s3_catalog


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with moto_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def s3_catalog(moto: MotoServer, tmp_path: Path) -> Iterator[S3Catalog]:
    cat = new_s3_catalog(moto, tmp_path / "s3catalog", "s3cat")
    with catalogs_in_process(cat):  # type: ignore[arg-type]
        yield cat


@pytest.fixture(scope="session")
def checking_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CheckingS3]:
    """A second moto_server that checks every request's credentials (IAM set up, then enforced)."""
    with moto_server(tmp_path_factory.mktemp("moto-checking")) as server:
        yield CheckingS3.setup(server)


@pytest.fixture
def rest_catalog(checking_s3: CheckingS3, tmp_path: Path) -> Iterator[RestCatalogFixture]:
    """The REST catalog test fixture (tests.support.rest_catalog) as catalog `restcat`, vending keys."""
    cat = new_rest_catalog(checking_s3, tmp_path / "restcatalog", "restcat")
    try:
        with catalogs_in_process(cat):  # type: ignore[arg-type]
            yield cat
    finally:
        cat.stop()
