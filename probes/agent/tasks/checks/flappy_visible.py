"""Public checks for flappy.py, run by the run_tests tool."""


def smoke(m):
    g = m.Game(seed=0)
    for i in range(100):
        g.step(i % 10 == 0)


def test_starts_in_the_middle(m):
    g = m.Game()
    assert g.bird_y == m.HEIGHT / 2 and g.bird_vy == 0 and g.score == 0 and not g.over


def test_falls_without_flapping(m):
    g = m.Game()
    g.step(False)
    assert g.bird_y > m.HEIGHT / 2


def test_flap_goes_up(m):
    g = m.Game()
    g.step(True)
    assert g.bird_vy < 0 and g.bird_y < m.HEIGHT / 2
