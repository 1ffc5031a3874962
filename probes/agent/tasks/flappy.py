"""Flappy Bird as a headless game module with exact physics, pipes, collisions and scoring."""

from __future__ import annotations

from probes.agent.tasks.base import Task

PROMPT = """\
Write a headless Flappy Bird game module in a single file `flappy.py` (standard library only, no
graphics, no input, no printing). Coordinates are pixels, x grows to the right, y grows downward.

Module-level constants, exactly:
WIDTH = 400, HEIGHT = 600, GRAVITY = 0.5, FLAP_VELOCITY = -8.0, BIRD_X = 80, BIRD_RADIUS = 12,
PIPE_WIDTH = 60, GAP_SIZE = 150, PIPE_SPEED = 3.0, PIPE_SPACING = 220

class Pipe: constructed as Pipe(x, gap_y); attributes x (left edge, float), gap_y (centre of the
gap, float) and scored (bool, initially False).

class Game: constructed as Game(seed=0). Attributes: bird_y (starts at HEIGHT / 2), bird_vy (starts
at 0.0), score (starts at 0), over (starts False), pipes (a list of Pipe, starts with one pipe at
x = WIDTH). Gap centres come from random.Random(seed): gap_y = rng.randint(150, 450).

Game.step(flap) advances one tick, in this order:
1. If over is True, do nothing at all.
2. If flap is true, set bird_vy = FLAP_VELOCITY. Then bird_vy += GRAVITY, and bird_y += bird_vy.
3. Every pipe moves left: x -= PIPE_SPEED. Remove pipes whose x + PIPE_WIDTH < 0.
4. If there are no pipes, or the last pipe's x <= WIDTH - PIPE_SPACING, append a new
   Pipe(WIDTH, gap_y) with gap_y drawn from the game's rng.
5. Scoring: each pipe that is not yet scored and whose x + PIPE_WIDTH < BIRD_X becomes scored, and
   score increases by 1.
6. Collision: over becomes True if bird_y + BIRD_RADIUS >= HEIGHT (ground), or
   bird_y - BIRD_RADIUS <= 0 (ceiling), or for any pipe that overlaps the bird horizontally
   (BIRD_X + BIRD_RADIUS > x and BIRD_X - BIRD_RADIUS < x + PIPE_WIDTH) the bird is not inside the
   gap (bird_y - BIRD_RADIUS < gap_y - GAP_SIZE / 2 or bird_y + BIRD_RADIUS > gap_y + GAP_SIZE / 2).
"""

FLAPPY = Task(name="flappy", filename="flappy.py", prompt=PROMPT)
