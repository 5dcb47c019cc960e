"""Audit and operator tools: replay and verify, as-of answers, explain, audit, what-if.

Everything here reads the live state or rebuilds it in a shadow schema with the service's
own projection code (``minruntime.ingest``); nothing here writes the live state.
"""
