"""Load catalogs and tables through pyiceberg's own configuration, with one-line errors."""

from __future__ import annotations

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.exceptions import ValidationError as PyIcebergValidationError
from pyiceberg.table import Table

from icetail.catalogs import open_catalog as open_catalog  # re-exported: callers open and load from here
from icetail.kernel.errors import (
    CatalogUnavailableError,
    ConfigError,
    MetadataError,
    TableNotFoundError,
    error_text,
)
from icetail.kernel.storage_errors import StorageErrorKind, storage_error, storage_error_kind


def load_table(catalog: Catalog, identifier: str) -> Table:
    """The table `NS.TABLE`; unknown names and unreadable metadata become terminal errors."""
    if "." not in identifier:
        raise ConfigError(f"table {identifier!r} must be written as NAMESPACE.TABLE")
    try:
        return catalog.load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise TableNotFoundError(
            f"table {identifier!r} does not exist in catalog {catalog.name!r}; check --table and --catalog"
        ) from exc
    except FileNotFoundError as exc:
        raise MetadataError(
            f"table {identifier!r}: metadata file is missing ({exc}); restore it or re-register the table"
        ) from exc
    except OSError as exc:
        if storage_error_kind(exc) in (StorageErrorKind.DENIED, StorageErrorKind.TRANSIENT):
            raise storage_error(exc, "table", f"{identifier!r}: metadata") from exc
        raise MetadataError(f"table {identifier!r}: metadata cannot be read ({exc}); check the catalog entry") from exc
    except ValueError as exc:
        raise MetadataError(f"table {identifier!r}: metadata cannot be read ({exc}); check the catalog entry") from exc
    except PyIcebergValidationError as exc:
        raise MetadataError(
            f"table {identifier!r}: pyiceberg cannot parse its metadata ({_validation_problem(exc)}); "
            "icetail cannot follow a table that uses this feature yet"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - catalog backends raise their own connection errors
        raise CatalogUnavailableError(
            f"catalog {catalog.name!r} failed loading {identifier!r}: {error_text(exc)}"
        ) from exc


def list_table_names(catalog: Catalog, namespace: str) -> tuple[str, ...]:
    """The names of the tables of `namespace` (within it, sorted); a namespace that does not exist is
    a terminal TableNotFoundError, a catalog that fails to answer a transient CatalogUnavailableError."""
    try:
        identifiers = catalog.list_tables(namespace)
    except NoSuchNamespaceError as exc:
        raise TableNotFoundError(
            f"namespace {namespace!r} does not exist in catalog {catalog.name!r}; check the tables entry's namespace"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - catalog backends raise their own connection errors
        raise CatalogUnavailableError(
            f"catalog {catalog.name!r} failed listing namespace {namespace!r}: {error_text(exc)}"
        ) from exc
    return tuple(sorted(identifier[-1] for identifier in identifiers))


def _validation_problem(exc: PyIcebergValidationError) -> str:
    """The first problem pydantic found, in one line: `Unsupported field type: 'variant' at schemas.0...`."""
    cause = exc.__cause__
    if isinstance(cause, PydanticValidationError) and cause.errors():
        first = cause.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{first['msg'].removeprefix('Value error, ')} at {where}"
    return error_text(exc)
