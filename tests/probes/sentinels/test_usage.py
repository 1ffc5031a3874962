import pytest

from probes.sentinels.usage import UsagePoint, check_linear, compare_counts, fit_line

TOL = {"rel_tolerance": 0.05, "abs_tolerance": 2, "min_slope": 0.4}


def points(prefix, locals_, r):
    return [UsagePoint(f"{prefix}{x}", x, r(x)) for x in locals_]


def test_fit_line_recovers_slope_and_intercept():
    slope, intercept = fit_line([10, 20, 40], [19, 31, 55])
    assert slope == pytest.approx(1.2)
    assert intercept == pytest.approx(7.0)


def test_a_linear_endpoint_passes_even_with_another_tokenizer():
    fit = points("fit", [16, 48, 96], lambda x: round(1.18 * x + 9))
    long = points("long", [400, 1600, 6000], lambda x: round(1.18 * x + 9))
    out = check_linear(fit, long, **TOL)
    assert out.details["finding"] == "linear"
    assert out.details["slope"] == pytest.approx(1.18, abs=0.01)
    assert out.statistic < 0.01


def test_counts_that_stop_growing_are_flattened_and_say_where():
    def cut(x):
        return min(round(1.2 * x + 9), 512)

    out = check_linear(points("fit", [16, 48, 96], cut), points("long", [300, 800, 1600], cut), **TOL)
    assert out.details["finding"] == "flattened"
    assert out.details["flattened"] == ["long800", "long1600"]
    assert out.details["cut_reported"] == 512
    assert out.details["first_cut_local"] == 800
    assert out.statistic > 0.5


def test_counts_above_the_line_are_excess():
    fit = points("fit", [16, 48, 96], lambda x: x + 5)
    out = check_linear(fit, [UsagePoint("long", 1000, 1500)], **TOL)
    assert out.details["finding"] == "excess"
    assert out.details["excess"] == ["long"]


def test_counts_that_never_grow_are_flat():
    out = check_linear(points("fit", [16, 48, 96], lambda x: 40), [], **TOL)
    assert out.details["finding"] == "flat"


def test_missing_usage_is_no_usage_and_one_fit_point_is_too_few():
    assert check_linear(points("fit", [16, 48], lambda x: None), [], **TOL).details["finding"] == "no_usage"
    fit = [UsagePoint("a", 16, 20), UsagePoint("b", 48, None)]
    assert check_linear(fit, [UsagePoint("c", 500, 600)], **TOL).details["finding"] == "too_few"


def test_compare_counts_allows_the_tolerance_and_names_mismatches():
    out = compare_counts({"a": 100, "b": 205, "c": None}, {"a": 102, "b": 200, "c": 50}, tolerance=2)
    assert out.details["finding"] == "mismatch"
    assert out.details["mismatched"] == ["b"]
    assert out.statistic == 5
    assert compare_counts({"a": 100}, {"a": 98}, tolerance=2).details["finding"] == "match"
    assert compare_counts({"a": 100}, {}, tolerance=2).details["finding"] == "no_pairs"
