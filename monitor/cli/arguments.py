"""Argument types shared by the commands."""

from __future__ import annotations

import argparse


def column_list(text: str) -> tuple[str, ...]:
    """`a,b` -> ("a", "b"); at least one name."""
    columns = tuple(c.strip() for c in text.split(",") if c.strip())
    if not columns:
        raise argparse.ArgumentTypeError("needs at least one column name, e.g. a,b")
    return columns
