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


def _raw(**changes):
    raw = {
        "schema": SCHEMA_VERSION,
        "models": ["m"],
        "settings": {"prompts": list(DRIFT.prompts), "requests": 10, "top_logprobs": 20},
        "honest": {"n": 3, "values": [0.0, 0.05, 0.1]},
    }
    raw.update(changes)
    return raw


def test_the_committed_smollm2_calibration_has_the_schema_and_matches_the_probe():
    path = BUNDLED / "smollm2.json"
    raw = json.loads(path.read_text())
    cal = load_calibration(path)
    assert {"smollm2", "smollm2-135m-instruct"} <= set(cal.models)
    assert cal.prompts == DRIFT.prompts and cal.top_logprobs == DRIFT.top_logprobs and cal.requests == DRIFT.requests
    assert raw["gguf"]["file"].endswith(".gguf") and len(raw["gguf"]["sha256"]) == 64
    assert raw["reference"] in raw["engines"]
    assert raw["honest"]["quantiles"] == pytest.approx(honest_quantiles(cal.values))
    # Every honest value is one prompt of one kept pair, and every kept pair was measured.
    measured = {tuple(sorted((p["a"], p["b"]))): p for p in raw["pairs"]}
    kept = [measured[tuple(sorted(pair))] for pair in raw["honest"]["pairs_kept"]]
    assert sorted(v["statistic"] for p in kept for v in p["prompts"].values()) == pytest.approx(sorted(cal.values))
    for pair in raw["pairs"]:
        assert {pair["a"], pair["b"]} <= set(raw["engines"])
        assert set(pair["prompts"]) == set(cal.prompts)
    assert sum(len(f) for f in raw["honest"]["identical_windows"]) == len(raw["engines"])


def test_quantiles_summarise_the_values():
    q = honest_quantiles([0.0, 1.0])
    assert (q["q50"], q["max"]) == (0.5, 1.0)


@pytest.mark.parametrize(
    "raw",
    [
        [],
        _raw(schema=99),
        _raw(models=[]),
        _raw(honest={"n": 2, "values": [0.1]}),
        _raw(honest={"n": 1, "values": [-0.1]}),
        _raw(honest={"n": 1, "values": ["nan"]}),
        {"schema": SCHEMA_VERSION},
    ],
)
def test_bad_files_are_refused_in_one_line(raw):
    with pytest.raises(CalibrationError) as info:
        parse_calibration(raw, "cal.json")
    assert str(info.value).startswith("cal.json: ") and "\n" not in str(info.value)


def test_the_bundled_file_serves_the_shipped_model_names():
    for model in ("smollm2", "smollm2-135m-instruct"):
        cal, note = find_calibration(model, None, DRIFT.prompts, 20)
        assert cal is not None and note == "calibrated: smollm2.json"


def test_an_unknown_model_or_other_settings_fall_back_with_a_note():
    cal, note = find_calibration("gpt-x", None, DRIFT.prompts, 20)
    assert cal is None and "no honest calibration for model 'gpt-x'" in note
    cal, note = find_calibration("smollm2", None, DRIFT.prompts, 5)
    assert cal is None and "other settings" in note
    cal, note = find_calibration("smollm2", None, ("a prompt it never saw",), 20)
    assert cal is None and "other settings" in note


def test_a_configured_file_comes_first(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(_raw(models=["smollm2"])))
    cal, note = find_calibration("smollm2", str(path), DRIFT.prompts, 20)
    assert cal is not None and cal.values == (0.0, 0.05, 0.1) and note == "calibrated: cal.json"


def test_an_unusable_configured_file_says_why(tmp_path):
    cal, note = find_calibration("smollm2", str(tmp_path / "missing.json"), DRIFT.prompts, 20)
    assert cal is None and "cannot read" in note
    (tmp_path / "bad.json").write_text("{")
    cal, note = find_calibration("smollm2", str(tmp_path / "bad.json"), DRIFT.prompts, 20)
    assert cal is None and "not JSON" in note
