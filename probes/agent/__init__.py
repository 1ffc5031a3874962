"""Agent evals: a model gets a small coding task and tools (write, read, run the visible tests),
the harness runs its tool calls for up to K steps, and a deterministic grader runs the result in a
sandbox (`sandbox`) against hidden checks (`tasks`, `grader`, `loop`, `probe`)."""
