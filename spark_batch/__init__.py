"""PySpark data source over storage segments and snapshots."""
