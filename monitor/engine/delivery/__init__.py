"""The ways a batch written ahead is delivered to the sink, one module each, behind one interface.

- base.py: `Delivery`, the interface (`deliver(batch, tally) -> completed`);
- context.py: what every way shares (`DeliveryContext`, `BatchToDeliver`, `Tally`);
- choice.py: `choose_delivery`, called once when the pipeline opens its sink: the only place that
  asks what the sink can do;
- ordered.py: a batch chunk by chunk in plan order (every batch but a `--net` one), through
- chunks.py: how its chunks reach the sink: `EachChunk`, `StagedGroups`, `WrittenGroups`;
- snapshots.py: its gathered snapshots, reconciled whole (`WholeSnapshot`) or in partitions
  (`SnapshotPartitions`);
- net.py, partitioned_net.py: a `--net` batch, folded in the driver or by Spark tasks in partitions.

A new way of delivering is a new module here, chosen in choice.py; the pipeline does not change.
"""
