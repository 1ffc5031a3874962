"""Check scripts that run only inside the sandbox, never imported by the gateway.

Each takes the imported solution module as its argument (`smoke(m)`, `behaviour_*(m)`, `test_*(m)`);
see `probes.agent.check_runner`.
"""
