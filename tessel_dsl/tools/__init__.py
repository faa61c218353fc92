"""Workflows over every layer: spec expectations (`tessel test`), the pytest plugin, profiling."""
