"""Hidden checks for snake.py."""


def smoke(m):
    g = m.SnakeGame(20, 20, foods=[(x, y) for y in range(1, 20, 3) for x in range(3, 20, 4)])
    moves = ["right", "down", "left", "down"]
    for start in range(0, 2000, 100):  # 100 moves per request; a game that is over does not move
        calls = []
        for i in range(start, start + 100):
            if i % 7 == 0:
                calls.append((g.turn, (moves[(i // 7) % 4],)))
            calls.append((g.step, ()))
        driver.calls(calls)  # noqa: F821 - from the judge
        if g.over:
            g = m.SnakeGame(20, 20, foods=[(5, 5)])


def behaviour_moves(m):
    g = m.SnakeGame(10, 10)
    g.step()
    assert g.body == [(3, 0), (2, 0), (1, 0)], g.body


def behaviour_grows(m):
    g = m.SnakeGame(10, 10, foods=[(3, 0), (9, 9)])
    g.step()
    assert g.body == [(3, 0), (2, 0), (1, 0), (0, 0)] and g.score == 1 and g.food == (9, 9), (g.body, g.score)


def behaviour_dies_on_wall(m):
    g = m.SnakeGame(5, 5)
    for _ in range(3):
        g.step()
    assert g.over, f"head at {g.body[0]} in a 5x5 grid, over={g.over}"


def behaviour_dies_on_self(m):
    g = m.SnakeGame(10, 10, foods=[(3, 0), (4, 0)])
    g.step()
    g.step()  # length 5: [(4,0),(3,0),(2,0),(1,0),(0,0)]
    for d in ("down", "left", "up"):
        g.turn(d)
        g.step()
    assert g.over, f"the head ran into the body: {g.body}"


def test_initial_state(m):
    g = m.SnakeGame()
    assert g.body == [(2, 0), (1, 0), (0, 0)] and g.direction == "right" and g.food is None
    assert g.score == 0 and g.over is False


def test_turns(m):
    g = m.SnakeGame(10, 10)
    g.turn("down")
    g.step()
    assert g.body[0] == (2, 1) and g.direction == "down"
    g.turn("left")
    g.step()
    assert g.body[0] == (1, 1)


def test_opposite_turn_ignored(m):
    g = m.SnakeGame(10, 10)
    g.turn("left")
    g.step()
    assert g.direction == "right" and g.body[0] == (3, 0) and not g.over


def test_bad_direction(m):
    g = m.SnakeGame()
    try:
        g.turn("north")
    except ValueError:
        return
    raise AssertionError("turn('north') was accepted")


def test_wall_leaves_body(m):
    g = m.SnakeGame(4, 4)
    g.step()
    body = list(g.body)
    g.step()
    assert g.over and g.body == body, g.body


def test_over_freezes(m):
    g = m.SnakeGame(3, 3)
    g.step()
    assert g.over
    body = list(g.body)
    g.step()
    assert g.body == body and g.over


def test_tail_cell_is_free(m):
    g = m.SnakeGame(10, 10, foods=[(3, 0)])
    g.step()  # [(3,0),(2,0),(1,0),(0,0)]
    for d in ("down", "left", "up"):
        g.turn(d)
        g.step()
    # a 4-cell loop: the head moves into the cell the tail just left
    assert not g.over and g.body[0] == (2, 0), (g.over, g.body)


def test_food_runs_out(m):
    g = m.SnakeGame(10, 10, foods=[(3, 0)])
    g.step()
    assert g.food is None and g.score == 1
    g.step()
    assert len(g.body) == 4


def test_up_is_negative_y(m):
    g = m.SnakeGame(10, 10)
    g.turn("down")
    g.step()
    g.step()
    g.turn("right")
    g.step()
    g.turn("up")
    g.step()
    assert g.body[0] == (3, 1), g.body
