"""The Spark 4 Python data source `icetail`: options, offsets, partitions (no pyspark) and the source classes."""
