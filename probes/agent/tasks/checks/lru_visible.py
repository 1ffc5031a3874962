"""Public checks for lru_cache.py."""


def test_put_and_get(m):
    c = m.LRUCache(2)
    c.put("x", 1)
    assert c.get("x") == 1


def test_size_is_bounded(m):
    c = m.LRUCache(1)
    c.put("x", 1)
    c.put("y", 2)
    assert len(c) == 1 and c.get("y") == 2
