"""Catalogs: one owner per kind of hardware or strategy fact, read by topology, estimator, planner, emitter and check.

Pure data and lookups; imports nothing from the rest of the package, so every layer may read it.
"""
