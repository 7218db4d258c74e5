"""The search layer: one analysis of text for every purpose (`analysis`), the query language (`query`), the
full-text index derived from the archive (`index`), keyword matching for subscriptions (`match`) and
highlighting (`highlight`).

This package's `__init__` imports nothing, so the store can use the pure text modules (`analysis`, `match`)
without importing the rest: import the module you need, e.g. `from bot.search.query import parse_query`.
"""
