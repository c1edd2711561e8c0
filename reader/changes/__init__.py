"""Change semantics: when read rows leave (release), update pairing and carry-over removal
(reconcile), net changes (net, net_rows), summary checks (checks), how a snapshot too big for the
driver is cut into partitions (partitions) and their shuffled forms, and a table's read setup."""
