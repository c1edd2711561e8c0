"""argparse that answers a misspelt flag or command with the one meant: `--tabel` -> `did you mean --table?`.

Stock argparse answers `--tabel ns.t` with its usage block and `required: --table`, or
`unrecognized arguments`, and leaves the user to spot the typo. Here any argparse error is
checked first for an option the command does not have; if there is one, the answer is one
line naming it and the closest option of the subcommand given (difflib), exit status 2.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors about an unknown option suggest the option meant."""

    _seen: list[str] | None = None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._seen = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self._suggest_command()
        parser, tokens = self._command_parser()
        unknown = next((flag for flag in _flags(tokens) if not parser._knows(flag)), None)
        if unknown is not None:
            close = difflib.get_close_matches(unknown, parser._long_options(), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"see {parser.prog} --help"
            self.exit(2, f"{parser.prog}: error: unknown option {unknown}; {hint}\n")
        # one line, as every other refusal: the usage block is what `--help` is for
        parser.exit(2, f"{parser.prog}: error: {message}; see {parser.prog} --help\n")

    def _suggest_command(self) -> None:
        """`icetail chnges`: one line with the command meant, exit 2 (the first word that is not a flag)."""
        for action in self._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            word = next((token for token in self._seen or [] if not token.startswith("-")), None)
            if word is None or word in action.choices:
                return
            close = difflib.get_close_matches(word, list(action.choices), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"commands: {', '.join(action.choices)}"
            self.exit(2, f"{self.prog}: error: unknown command {word!r}; {hint}\n")

    def _command_parser(self) -> tuple[SuggestingParser, list[str]]:
        """The (sub)parser the arguments are for, and the arguments it reads."""
        tokens = self._seen or []
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for index, token in enumerate(tokens):
                    chosen: Any = action.choices.get(token)
                    if isinstance(chosen, SuggestingParser):
                        return chosen._command_parser_from(tokens[index + 1 :])
        return self, tokens

    def _command_parser_from(self, tokens: list[str]) -> tuple[SuggestingParser, list[str]]:
        self._seen = tokens
        return self._command_parser()

    def _knows(self, flag: str) -> bool:
        """An option of this parser, or a prefix argparse expands to exactly one."""
        if flag in self._option_string_actions:
            return True
        prefixed = [option for option in self._option_string_actions if option.startswith(flag)]
        return self.allow_abbrev and flag.startswith("--") and len(prefixed) == 1

    def _long_options(self) -> list[str]:
        return [option for option in self._option_string_actions if option.startswith("--")]


def _flags(tokens: list[str]) -> list[str]:
    """The option names among `tokens` (`--name=value` as `--name`), up to a `--`."""
    flags = []
    for token in tokens:
        if token == "--":
            break
        if token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token):
            flags.append(token.split("=", 1)[0])
    return flags
