"""A least-recently-used cache with a fixed capacity."""

from __future__ import annotations

from probes.agent.tasks.base import Task

PROMPT = """\
Write `lru_cache.py` (standard library only) with a class LRUCache:

LRUCache(capacity): capacity is an int >= 1; raise ValueError otherwise.
get(key, default=None): return the value stored for key and make key the most recently used; if
  key is absent return default (and change nothing).
put(key, value): store value under key and make key the most recently used (updating an existing
  key keeps one entry). If the cache then holds more than capacity entries, remove the least
  recently used one.
len(cache): the number of entries.
key in cache: whether key is stored; this does NOT change how recently it was used.
keys(): a list of the stored keys from least to most recently used.
"""

LRU = Task(name="lru", filename="lru_cache.py", prompt=PROMPT)
