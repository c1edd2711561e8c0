"""Change semantics: update pairing, carry-over removal, net changes, and their partitioned (shuffled) forms."""
