"""Public checks for snake.py."""


def test_starts_right(m):
    g = m.SnakeGame()
    assert g.body == [(2, 0), (1, 0), (0, 0)] and g.direction == "right"


def test_moves_one_cell(m):
    g = m.SnakeGame()
    g.step()
    assert g.body[0] == (3, 0) and len(g.body) == 3
