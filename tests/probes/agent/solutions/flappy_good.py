import random

WIDTH = 400
HEIGHT = 600
GRAVITY = 0.5
FLAP_VELOCITY = -8.0
BIRD_X = 80
BIRD_RADIUS = 12
PIPE_WIDTH = 60
GAP_SIZE = 150
PIPE_SPEED = 3.0
PIPE_SPACING = 220


class Pipe:
    def __init__(self, x, gap_y):
        self.x = float(x)
        self.gap_y = float(gap_y)
        self.scored = False


class Game:
    def __init__(self, seed=0):
        self.rng = random.Random(seed)
        self.bird_y = HEIGHT / 2
        self.bird_vy = 0.0
        self.score = 0
        self.over = False
        self.pipes = [Pipe(WIDTH, self.rng.randint(150, 450))]

    def step(self, flap):
        if self.over:
            return
        if flap:
            self.bird_vy = FLAP_VELOCITY
        self.bird_vy += GRAVITY
        self.bird_y += self.bird_vy
        for pipe in self.pipes:
            pipe.x -= PIPE_SPEED
        self.pipes = [p for p in self.pipes if p.x + PIPE_WIDTH >= 0]
        if not self.pipes or self.pipes[-1].x <= WIDTH - PIPE_SPACING:
            self.pipes.append(Pipe(WIDTH, self.rng.randint(150, 450)))
        for pipe in self.pipes:
            if not pipe.scored and pipe.x + PIPE_WIDTH < BIRD_X:
                pipe.scored = True
                self.score += 1
        top, bottom = self.bird_y - BIRD_RADIUS, self.bird_y + BIRD_RADIUS
        if bottom >= HEIGHT or top <= 0:
            self.over = True
        for pipe in self.pipes:
            overlaps = BIRD_X + BIRD_RADIUS > pipe.x and BIRD_X - BIRD_RADIUS < pipe.x + PIPE_WIDTH
            if overlaps and (top < pipe.gap_y - GAP_SIZE / 2 or bottom > pipe.gap_y + GAP_SIZE / 2):
                self.over = True
