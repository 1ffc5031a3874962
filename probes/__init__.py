"""Background quality probes (logprob drift, MMD, tool calls, agent evals, sentinels).

Arrives with the probes issues; the package exists so the layout is stable.
"""
