"""Pure statistics behind the quality probes: numpy/scipy only, no I/O, RNG passed in.

- `permutation`: permutation p-values, optionally stratified.
- `drift`: the LT logprob-drift statistic and its per-prompt test (Bonferroni over prompts).
- `equivalence`: a reference comparison against the honest cross-engine margin (probes.calibration).
- `mmd`: unbiased MMD² with MET's Hamming kernel and a stratified permutation test.
- `fidelity`: χ² of sampled tokens against the distribution implied by the logprobs.
- `evalues`: window e-values, the p-to-e calibrator and the e-CUSUM update.
- `cusum`: a Bernoulli CUSUM for error rates (tool calls).
- `ebh`: e-BH false discovery control over e-values (the fleet's demotions, `probes.fleet`).
"""
