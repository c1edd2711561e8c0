"""Commands icetail suggests in its error lines, written so that they work when pasted.

Every `icetail reset` hint names `--state` (reset has no default store) and quotes what a shell
would split or run (`?`, `&` in a PostgreSQL URL); the store URL appears redacted, so a hint never
prints a password (give it again, or through PGPASSWORD).
"""

from __future__ import annotations

import shlex

from icetail.kernel.secrets import redact_text


def reset_command(state_url: str, consumer: str, *options: str) -> str:
    """`icetail reset --state URL --consumer ID OPTIONS...`, in backquotes; `options` are already words."""
    words = ["icetail", "reset", "--state", shlex.quote(redact_text(state_url)), "--consumer", shlex.quote(consumer)]
    return "`" + " ".join([*words, *options]) + "`"
