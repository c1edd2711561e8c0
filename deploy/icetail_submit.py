"""spark-submit entry point for icetail: `spark-submit ... icetail_submit.py run --until-caught-up ...`.

deploy/spark-submit.sh ships the icetail package with --py-files; this script
only hands its arguments to the icetail CLI, so the job takes exactly `icetail`'s arguments.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from icetail.monitor.cli.main import main as icetail_main  # from the --py-files zip (or an installed icetail)

    code = icetail_main(argv)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
