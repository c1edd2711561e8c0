"""Local pyiceberg SQL catalogs on SQLite under a test directory, resolvable by name in this process or a child."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table


@dataclass(frozen=True)
class LocalCatalog:
    """A SQLite-backed pyiceberg SQL catalog under `root` (name: lower-case letters and digits)."""

    name: str
    root: Path

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root}/catalog.db"

    @property
    def warehouse_path(self) -> Path:
        return self.root / "warehouse"

    def env(self) -> dict[str, str]:
        key = self.name.upper()
        return {
            f"PYICEBERG_CATALOG__{key}__TYPE": "sql",
            f"PYICEBERG_CATALOG__{key}__URI": self.uri,
            f"PYICEBERG_CATALOG__{key}__WAREHOUSE": f"file://{self.warehouse_path}",
        }

    def catalog(self) -> SqlCatalog:
        return SqlCatalog(self.name, uri=self.uri, warehouse=f"file://{self.warehouse_path}")

    def load(self, ident: str) -> Table:
        return self.catalog().load_table(ident)

    def try_load(self, ident: str) -> Table | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.load(ident)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None


def new_catalog(root: Path, name: str) -> LocalCatalog:
    if not name.isalnum() or name.lower() != name:
        raise ValueError(f"catalog name {name!r}: lower-case letters and digits only (pyiceberg env naming)")
    cat = LocalCatalog(name, Path(root).resolve())
    cat.warehouse_path.mkdir(parents=True, exist_ok=True)
    cat.catalog()  # creates the catalog tables
    return cat


@contextlib.contextmanager
def catalogs_in_process(*catalogs: LocalCatalog) -> Iterator[None]:
    """Make catalogs resolvable by name in this process (pyiceberg caches its env at import)."""
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    with pytest.MonkeyPatch.context() as patch:
        for cat in catalogs:
            for key, value in cat.env().items():
                patch.setenv(key, value)
        patch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())
        yield
