class TokenBucket:
    def __init__(self, rate, capacity, clock):
        if rate <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate = float(rate)
        self.capacity = float(capacity)
        self.clock = clock
        self.tokens = self.capacity
        self.last = clock()

    def _refill(self):
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now

    def available(self):
        self._refill()
        return self.tokens

    def allow(self, cost=1.0):
        if cost <= 0:
            raise ValueError("cost must be positive")
        self._refill()
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False
