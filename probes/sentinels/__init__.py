"""Sentinels: cheap checks for faults a distribution test misses.

- `usage`: the reported `usage.prompt_tokens` must grow linearly with the local count and match
  the reference's (a flattening means the prompt was cut);
- `needle`: a code hidden at several depths of long filler must be retrieved (silent truncation);
- `loops`: responses that run to `max_tokens` repeating themselves (a looping engine).

`probe.SentinelsProbe` runs the three as one probe named ``sentinels``.
"""
