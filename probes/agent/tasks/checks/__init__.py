"""Check scripts that run only inside the sandbox, never imported by the gateway.

Each takes the solution's module as its argument (`smoke(m)`, `behaviour_*(m)`, `test_*(m)`). They run
in the judge's sandbox, never in the solution's: `m` is a proxy whose reads and calls the solution's
process answers with plain values, and `driver.clock(now)` makes a clock there; see `probes.agent.judge`.
"""
