"""The `icetail` command: argument parsing and error reporting only.

Exit status: 0 success, 2 bad input (one line on stderr naming the problem and the fix),
1 unexpected or transient failure, 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (one line each).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

from icetail.kernel.errors import IcetailError
from icetail.kernel.secrets import redact_text
from icetail.monitor.cli.examples import add_examples
from icetail.monitor.cli.flags import SuggestingParser
from icetail.monitor.cli.launch import Terminated, stopped
from icetail.monitor.cli.launch import entry as launch_entry
from icetail.monitor.cli.parsers import register_all
from icetail.monitor.service.logs import quiet_py4j_root_records

_PACKAGE = "icetail.monitor.cli"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; light (parsers.py): a command's own modules load when it runs."""
    parser = SuggestingParser(prog="icetail", description="tail -f for Apache Iceberg tables")
    parser.add_argument("--version", action=VersionAction)
    subparsers = parser.add_subparsers(dest="command", required=True)
    register_all(subparsers)
    add_examples(subparsers)
    return parser


class VersionAction(argparse.Action):
    """`--version`: the installed version, read only when asked for (importlib.metadata scans site-packages)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from icetail._version import installed_version

        print(f"icetail {installed_version()}")  # on stdout, as argparse's own version action
        parser.exit(0)


def command_of(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The handler a command names (`module:function` of icetail.monitor.cli), imported now."""
    module, function = args.handler.split(":")
    return cast(Callable[[argparse.Namespace], int], getattr(importlib.import_module(f"{_PACKAGE}.{module}"), function))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except Terminated:
        return stopped()
    args = parser.parse_args(argv)
    try:
        return int(command_of(args)(args))
    except IcetailError as exc:
        print(f"icetail: error: {exc}", file=sys.stderr)
        return exc.exit_code  # 2 for a TerminalError (fix the input), 1 for a TransientError
    except BrokenPipeError:
        # the reader of stdout went away (e.g. `| head`): not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Terminated:
        return stopped()
    except KeyboardInterrupt:
        print("icetail: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 1
        lost = _lost_session(exc)
        if lost is not None:
            print(f"icetail: error: {lost}", file=sys.stderr)
            return lost.exit_code
        print(f"icetail: unexpected error: {redact_text(f'{type(exc).__name__}: {exc}')}", file=sys.stderr)
        return 1


def _lost_session(exc: Exception) -> IcetailError | None:
    """A JVM that died under the run (reader/spark/session_health.py); imported only when pyspark was."""
    if "pyspark" not in sys.modules:
        return None
    from icetail.reader.spark.session_health import lost_session_error

    return lost_session_error(exc)


def run_command() -> int:
    """The command line's exit status, once launch.py's SIGTERM handler is in place."""
    # pyspark 4 warns on every start under pandas >= 3, which icetail's read path does not use:
    # keep stderr to icetail's own one-line messages
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    quiet_py4j_root_records()
    return main()


def entry() -> None:
    """`icetail` (kept for scripts that import it; the console script is launch.entry)."""
    launch_entry()


if __name__ == "__main__":
    entry()
