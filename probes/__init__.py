"""Background quality probes: each endpoint is measured against a reference and against its own
past (logprob drift, MMD distribution test, sampling fidelity, tool calls, agent evals, sentinels);
results become evidence that moves the endpoint's health state (`probes.policy`).

One probe per module; each has a pure statistic apart from its sampling I/O (`probes.base`).
"""
