"""Snake game logic on a grid, with food positions injected for determinism."""

from __future__ import annotations

from probes.agent.tasks.base import Task

PROMPT = """\
Write `snake.py` (standard library only, no graphics) with a class SnakeGame:

SnakeGame(width=10, height=10, foods=()): a grid of cells (x, y) with 0 <= x < width and
0 <= y < height; y grows downward. `foods` is a sequence of (x, y) cells where food appears, used
in order. Attributes:
- body: a list of (x, y) tuples, head first; it starts as [(2, 0), (1, 0), (0, 0)].
- direction: one of "up", "down", "left", "right"; it starts as "right".
- food: the current food cell, the first of `foods` (None if there is none).
- score: starts at 0. over: starts False.

turn(direction): set the direction for the next step; a turn to the exact opposite of the current
direction is ignored; any other name raises ValueError.

step(): one move. If over is True, do nothing. The new head is the head moved one cell in the
direction (up: y - 1, down: y + 1, left: x - 1, right: x + 1).
- If the new head is outside the grid, or on a body cell (the tail cell counts only when the
  snake is eating this step, since otherwise the tail moves away), set over = True and leave
  body unchanged.
- If the new head is the food cell: insert the head at the front and keep the tail (the snake
  grows by one), score += 1, and food becomes the next cell of `foods` (None when they run out).
- Otherwise insert the new head at the front and remove the last cell.
"""

SNAKE = Task(name="snake", filename="snake.py", prompt=PROMPT)
