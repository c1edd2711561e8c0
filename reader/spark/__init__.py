"""The Spark runtime: the session, its worker daemon, and the checks made before Spark starts."""
