import re

TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(.))")


def tokenize(text):
    tokens = []
    for number, other in TOKEN.findall(text):
        if number:
            tokens.append(("num", float(number)))
        elif other.strip():
            if other not in "+-*/()":
                raise ValueError(f"unknown character {other!r}")
            tokens.append(("op", other))
    return tokens


class Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def expr(self):
        value = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            right = self.term()
            value = value + right if op == "+" else value - right
        return value

    def term(self):
        value = self.unary()
        while self.peek() in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            right = self.unary()
            value = value * right if op == "*" else value / right
        return value

    def unary(self):
        if self.peek() in (("op", "+"), ("op", "-")):
            sign = -1.0 if self.take()[1] == "-" else 1.0
            return sign * self.unary()
        return self.atom()

    def atom(self):
        kind, value = self.take()
        if kind == "num":
            return value
        if (kind, value) == ("op", "("):
            inner = self.expr()
            if self.take() != ("op", ")"):
                raise ValueError("unbalanced parentheses")
            return inner
        raise ValueError("missing operand")


def evaluate(expr):
    tokens = tokenize(expr)
    if not tokens:
        raise ValueError("empty expression")
    parser = Parser(tokens)
    value = parser.expr()
    if parser.pos != len(tokens):
        raise ValueError("unexpected trailing input")
    return float(value)
