"""What keyed sinks share: their contract, the per-key merge of a chunk, and the versions of a history."""
