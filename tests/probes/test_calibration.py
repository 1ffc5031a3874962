import json

import pytest

from probes.calibration import (
    BUNDLED,
    SCHEMA_VERSION,
    CalibrationError,
    find_calibration,
    honest_quantiles,
    load_calibration,
    parse_calibration,
)
from probes.settings import DriftSettings

DRIFT = DriftSettings()


def _pair(a, b, stats, prompts=DRIFT.prompts):
    return {"a": a, "b": b, "prompts": {p: {"statistic": v, "p_value": 0.001} for p, v in zip(prompts, stats)}}


def _raw(**changes):
    """Three engine families (e0, e1 + its twin, e2): three independent cross-family pairs."""
    raw = {
        "schema": SCHEMA_VERSION,
        "models": ["m"],
        "settings": {"prompts": list(DRIFT.prompts), "requests": 10, "top_logprobs": 20},
        "engines": {"e0": {"family": 0}, "e1": {"family": 1}, "e1-twin": {"family": 1}, "e2": {"family": 2}},
        "honest": {
            "n": 3,
            "pairs": [
                _pair("e0", "e1", [0.0, 0.01, 0.02, 0.03]),
                _pair("e0", "e2", [0.05, 0.0, 0.0, 0.0]),
                _pair("e1", "e2", [0.1, 0.0, 0.0, 0.08]),
            ],
        },
    }
    raw.update(changes)
    return raw


def _honest(*pairs):
    return {"n": len(pairs), "pairs": list(pairs)}


def test_the_committed_smollm2_calibration_has_the_schema_and_matches_the_probe():
    path = BUNDLED / "smollm2.json"
    raw = json.loads(path.read_text())
    cal = load_calibration(path)
    assert {"smollm2", "smollm2-135m-instruct"} <= set(cal.models)
    assert cal.prompts == DRIFT.prompts and cal.top_logprobs == DRIFT.top_logprobs and cal.requests == DRIFT.requests
    assert raw["gguf"]["file"].endswith(".gguf") and len(raw["gguf"]["sha256"]) == 64
    assert raw["reference"] in raw["engines"]
    assert raw["honest"]["quantiles"] == pytest.approx(honest_quantiles(cal.values))
    family = {name: e["family"] for name, e in raw["engines"].items()}
    assert sorted(sorted(f) for f in raw["honest"]["families"]) == sorted(
        sorted(n for n in family if family[n] == i) for i in set(family.values())
    )
    for pair in raw["pairs"]:
        assert {pair["a"], pair["b"]} <= set(raw["engines"])
        assert set(pair["prompts"]) == set(cal.prompts)
        if family[pair["a"]] == family[pair["b"]]:  # a family's windows are identical: S = 0, no evidence
            assert all(v["statistic"] == 0.0 for v in pair["prompts"].values())
    # One honest value per pair of families (its largest S), not one per prompt of one pair.
    n_families = len(set(family.values()))
    assert raw["honest"]["n"] == len(cal.values) == n_families * (n_families - 1) // 2
    kept = raw["honest"]["pairs"]
    assert all(family[p["a"]] != family[p["b"]] for p in kept)
    assert list(cal.values) == pytest.approx(raw["honest"]["values"])
    assert list(cal.values) == pytest.approx([max(v["statistic"] for v in p["prompts"].values()) for p in kept])


def test_a_file_s_values_are_one_per_cross_family_pair_and_a_prompt_subset_uses_its_own():
    cal = parse_calibration(_raw(), "cal.json")
    assert cal.values == (0.03, 0.05, 0.1)
    x, qz = DRIFT.prompts[:2]
    assert cal.values_for((qz,)) == (0.01, 0.0, 0.0)
    assert cal.values_for((x, qz)) == (0.01, 0.05, 0.1)


def test_quantiles_summarise_the_values():
    q = honest_quantiles([0.0, 1.0])
    assert (q["q50"], q["max"]) == (0.5, 1.0)


@pytest.mark.parametrize(
    "raw",
    [
        [],
        _raw(schema=99),
        _raw(models=[]),
        _raw(honest=_honest(_pair("e0", "e1", [-0.1] * 4))),
        _raw(honest=_honest(_pair("e0", "e1", ["nan"] * 4))),
        _raw(honest=_honest(_pair("e0", "e1", [0.1]))),  # lacks prompts
        _raw(honest={"n": 4, "pairs": [_pair("e0", "e1", [0.1] * 4)]}),  # n counting prompts
        _raw(honest=_honest()),
        # A pair inside one family is a duplicate, and so is a second pair of the same two families.
        _raw(honest=_honest(_pair("e1", "e1-twin", [0.0] * 4))),
        _raw(honest=_honest(_pair("e0", "e1", [0.1] * 4), _pair("e0", "e1-twin", [0.1] * 4))),
        _raw(engines={"e0": {}, "e1": {"family": 1}}),  # an engine without its family
        _raw(schema=1),  # per-prompt values pooled over pairs: not read any more
        {"schema": SCHEMA_VERSION},
    ],
)
def test_bad_files_are_refused_in_one_line(raw):
    with pytest.raises(CalibrationError) as info:
        parse_calibration(raw, "cal.json")
    assert str(info.value).startswith("cal.json: ") and "\n" not in str(info.value)


def test_the_bundled_file_serves_the_shipped_model_names():
    for model in ("smollm2", "smollm2-135m-instruct"):
        cal, note = find_calibration(model, None, DRIFT.prompts, 20, 10)
        assert cal is not None and note == "calibrated: smollm2.json"


def test_an_unknown_model_or_other_settings_fall_back_with_a_note():
    cal, note = find_calibration("gpt-x", None, DRIFT.prompts, 20, 10)
    assert cal is None and "no honest calibration for model 'gpt-x'" in note
    cal, note = find_calibration("smollm2", None, DRIFT.prompts, 5, 10)
    assert cal is None and "other settings" in note
    cal, note = find_calibration("smollm2", None, ("a prompt it never saw",), 20, 10)
    assert cal is None and "other settings" in note
    cal, note = find_calibration("smollm2", None, DRIFT.prompts, 20, 6)  # windows of another size
    assert cal is None and "other settings" in note and "requests 10" in note


def test_a_strict_subset_of_the_prompts_is_calibrated_on_those_prompts(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(_raw(models=["smollm2"])))
    cal, note = find_calibration("smollm2", str(path), DRIFT.prompts[1:2], 20, 10)
    assert cal is not None and note == "calibrated: cal.json (1 of its 4 prompts)"
    assert cal.values_for(DRIFT.prompts[1:2]) == (0.01, 0.0, 0.0)


def test_a_configured_file_comes_first(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(_raw(models=["smollm2"])))
    cal, note = find_calibration("smollm2", str(path), DRIFT.prompts, 20, 10)
    assert cal is not None and cal.values == (0.03, 0.05, 0.1) and note == "calibrated: cal.json"


def test_an_unusable_configured_file_says_why(tmp_path):
    cal, note = find_calibration("smollm2", str(tmp_path / "missing.json"), DRIFT.prompts, 20, 10)
    assert cal is None and "cannot read" in note
    (tmp_path / "bad.json").write_text("{")
    cal, note = find_calibration("smollm2", str(tmp_path / "bad.json"), DRIFT.prompts, 20, 10)
    assert cal is None and "not JSON" in note
