"""The installed distribution's version (a checkout that is not installed says so)."""

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    try:
        return version("icetail")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        return "0+unknown"
