"""The bottom layer: the error tree, value types, clocks and the frozen-model base.

It imports nothing of ours, so every package above (providers, the gateway, probes) can use it;
`tests/test_layering.py` holds the whole order of layers.
"""
