"""The fault-injection testbed: OpenAI-compatible endpoints backed by real small models
(llama.cpp in-process), each serving honestly or under an injected fault, to show that the
probes detect each fault and to calibrate their thresholds. See `harness.Testbed`."""
