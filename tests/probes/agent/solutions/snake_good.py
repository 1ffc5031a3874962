DELTAS = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


class SnakeGame:
    def __init__(self, width=10, height=10, foods=()):
        self.width, self.height = width, height
        self._foods = list(foods)
        self.body = [(2, 0), (1, 0), (0, 0)]
        self.direction = "right"
        self.food = self._foods.pop(0) if self._foods else None
        self.score = 0
        self.over = False

    def turn(self, direction):
        if direction not in DELTAS:
            raise ValueError(f"unknown direction {direction!r}")
        if direction != OPPOSITE[self.direction]:
            self.direction = direction

    def step(self):
        if self.over:
            return
        dx, dy = DELTAS[self.direction]
        x, y = self.body[0]
        head = (x + dx, y + dy)
        eating = head == self.food
        blocking = self.body if eating else self.body[:-1]
        if not (0 <= head[0] < self.width and 0 <= head[1] < self.height) or head in blocking:
            self.over = True
            return
        self.body.insert(0, head)
        if eating:
            self.score += 1
            self.food = self._foods.pop(0) if self._foods else None
        else:
            self.body.pop()
