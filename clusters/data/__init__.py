"""The public datasets spotplane uses, loaded into typed objects of numpy arrays.

The data directory holds the normalised format described in ``shared/data/README.md`` (and
written by ``spotplane data fetch``). One convention everywhere: ``available[i]`` is the number
of the ``nodes`` requested instances available during tick ``i``, which lasts ``gap_seconds``.
``catalog.DataCatalog(data_dir)`` is the one entry point. Every loader checks each field or cell
it reads and refuses what it cannot use with :class:`~controlplane.core.errors.BadDataFile`
naming the file, the line or column, and the fix.
"""
