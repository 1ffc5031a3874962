from pathlib import Path

import pytest
import yaml

from gateway.config import load_config
from probes.testbed.config import TestbedConfigError, gateway_config_yaml, load_testbed_config, parse_testbed_config

REPO = Path(__file__).resolve().parents[3]


def test_shipped_config_has_every_advertised_fault() -> None:
    config = load_testbed_config(REPO / "deploy" / "testbed.yaml")
    specs = {s.name: s for s in config.specs()}
    faults = {name: s.fault_spec() for name, s in specs.items()}
    honest = [n for n, f in faults.items() if f.is_honest]
    assert len(honest) == 2 and {specs[n].process for n in honest} == {0, 1}
    assert any(f.substitute == "gemma3-270m" for f in faults.values())
    assert any(f.quantize == "Q2_K" for f in faults.values())
    assert any(f.logit_noise > 0 for f in faults.values())
    assert any(f.temperature == 0.7 for f in faults.values())
    partial = [f.partial for f in faults.values() if f.partial is not None]
    assert partial and partial[0].share == 0.5 and partial[0].fault.quantize == "Q2_K"


def test_gateway_snippet_is_a_valid_gateway_config(tmp_path: Path) -> None:
    config = load_testbed_config(REPO / "deploy" / "testbed.yaml")
    text = gateway_config_yaml(config, lambda name: f"http://127.0.0.1:9999/{name}/v1")
    path = tmp_path / "gw.yaml"
    path.write_text(text)
    settings = load_config(path, environ={})
    assert {d.endpoint_id for d in settings.deployments} == {f"testbed/{s.name}" for s in config.specs()}
    assert {d.model for d in settings.deployments} == {"smollm2"}
    assert {p.base_url for p in settings.providers} == {f"http://127.0.0.1:9999/{s.name}/v1" for s in config.specs()}
    assert all(not d.capabilities.native_n for d in settings.deployments)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({}, "endpoints"),
        ({"endpoints": []}, "endpoints"),
        ({"endpoints": [{"name": "a", "fault": {"logit_noise": -1}}]}, "endpoints.0: fault.logit_noise"),
        ({"endpoints": [{"name": "a"}, {"name": "a"}]}, "distinct"),
        ({"endpoints": [{"name": "_testbed"}]}, "endpoints.0"),
        ({"endpoints": [{"name": "a", "colour": "red"}]}, "colour"),
        ([1, 2], "mapping"),
    ],
)
def test_bad_config_is_one_line(raw: object, needle: str) -> None:
    with pytest.raises(TestbedConfigError) as info:
        parse_testbed_config(raw)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_unreadable_or_broken_files(tmp_path: Path) -> None:
    with pytest.raises(TestbedConfigError, match="cannot read"):
        load_testbed_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("endpoints: [\n")
    with pytest.raises(TestbedConfigError, match="not valid YAML"):
        load_testbed_config(broken)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"endpoints": [{"name": "a", "process": 1}], "n_ctx": 512}))
    assert load_testbed_config(good).specs()[0].process == 1
