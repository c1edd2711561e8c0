"""Load catalogs and tables through pyiceberg's own configuration, with one-line errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, NotInstalledError
from pyiceberg.exceptions import ValidationError as PyIcebergValidationError
from pyiceberg.table import Table
from pyiceberg.utils.config import Config

from icetail.kernel.errors import (
    CatalogNotFoundError,
    CatalogUnavailableError,
    ConfigError,
    MetadataError,
    TableNotFoundError,
    error_text,
    message_line,
)
from icetail.kernel.storage_errors import StorageErrorKind, storage_error, storage_error_kind


def open_catalog(name: str, overrides: Mapping[str, str] | None = None) -> Catalog:
    """The catalog `name` as configured in .pyiceberg.yaml or PYICEBERG_CATALOG__NAME__* variables.

    `overrides` (properties given some other way, e.g. as Spark data source options) win.
    """
    try:
        # read .pyiceberg.yaml and PYICEBERG_CATALOG__* now: pyiceberg's own copy is taken at import
        properties = {**cast(dict[str, str], Config().get_catalog_config(name) or {}), **(overrides or {})}
        return load_catalog(name, **properties)
    except (ValueError, KeyError) as exc:
        variable = f"PYICEBERG_CATALOG__{name.upper().replace('-', '_')}"
        raise CatalogNotFoundError(
            f"catalog {name!r} is not configured ({_pyiceberg_reason(exc)}); define it in .pyiceberg.yaml "
            f"(in PYICEBERG_HOME or the home directory) or set {variable}__URI and {variable}__TYPE"
        ) from exc
    except NotInstalledError as exc:
        kind = properties.get("type", "")
        extra = f"icetail[{kind}]" if kind in ("glue", "hive") else "the pyiceberg extra it names"
        raise CatalogNotFoundError(
            f"catalog {name!r} needs support that is not installed ({exc}); pip install '{extra}'"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - drivers raise their own types (sqlalchemy, requests)
        setup = _AWS_SETUP_ERRORS.get(type(exc).__name__)
        if setup is not None:  # botocore's: a retry cannot heal a missing region or credentials
            raise ConfigError(f"catalog {name!r} cannot start: {setup} ({error_text(exc)})") from exc
        raise CatalogUnavailableError(f"catalog {name!r} is unreachable: {error_text(exc)}") from exc


# botocore exception names (matched by name: botocore is only there with the glue extra) -> the fix
_AWS_SETUP_ERRORS = {
    "NoRegionError": "no AWS region is configured; set AWS_REGION or the catalog's glue.region property",
    "NoCredentialsError": "no AWS credentials were found; configure the AWS credential chain or glue.* properties",
    "PartialCredentialsError": "the AWS credentials are incomplete; check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
}


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


def _validation_problem(exc: PyIcebergValidationError) -> str:
    """The first problem pydantic found, in one line: `Unsupported field type: 'variant' at schemas.0...`."""
    cause = exc.__cause__
    if isinstance(cause, PydanticValidationError) and cause.errors():
        first = cause.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{first['msg'].removeprefix('Value error, ')} at {where}"
    return error_text(exc)


def _pyiceberg_reason(exc: BaseException) -> str:
    """pyiceberg's reason without its advice about a `--uri` flag, which is pyiceberg's CLI, not ours."""
    return message_line(exc).split(", please provide")[0]
