"""The `icetail` command: argument parsing and error reporting only.

Exit status: 0 success, 2 bad input (one line on stderr naming the problem and the fix),
1 unexpected or transient failure, 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (one line each).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from icetail._version import installed_version
from icetail.kernel.errors import IcetailError
from icetail.kernel.secrets import redact_text
from icetail.monitor.cli.examples import add_examples
from icetail.monitor.cli.flags import SuggestingParser
from icetail.monitor.cli.launch import Terminated, stopped
from icetail.monitor.cli.launch import entry as launch_entry
from icetail.monitor.service.logs import quiet_py4j_root_records


def build_parser() -> argparse.ArgumentParser:
    # the commands are imported here, not with this module: they import pyspark (seconds), and
    # launch.py installs the SIGTERM handler before, so a stop during start-up ends in one line too
    from icetail.monitor.cli import changes_cmd, demo, run_cmd, serve_cmd

    parser = SuggestingParser(prog="icetail", description="tail -f for Apache Iceberg tables")
    parser.add_argument("--version", action="version", version=f"icetail {installed_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in (changes_cmd, run_cmd, serve_cmd, demo):
        module.register(subparsers)
    add_examples(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except Terminated:
        return stopped()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
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
    """A JVM that died under the run (reader/session_health.py); imported only when pyspark was."""
    if "pyspark" not in sys.modules:
        return None
    from icetail.reader.session_health import lost_session_error

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
