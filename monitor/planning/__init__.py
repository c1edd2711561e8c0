"""What a range of snapshots changed, file by file: lineage, manifests, the snapshot diff, splits."""
