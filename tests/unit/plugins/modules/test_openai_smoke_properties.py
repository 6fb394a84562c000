"""Property tests: openai_smoke's options never give a traceback or an unbounded wait.

Every number option takes NaN, infinities, huge and negative integers, booleans, strings with
non-ASCII digits or control characters, lists and None; the answer is always a value in the
documented range or a fail_json that names the option and the range.
"""

import json
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _openai as O
from ansible_collections.labfleet.vllm.plugins.modules import openai_smoke

RANGES = {name: (low, high, integer) for name, low, high, integer in openai_smoke.NUMBER_OPTIONS}
PROPS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

ANYTHING = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10 ** 30, max_value=10 ** 30),
    # Built, not sampled: hypothesis prints its strategies, and 10**5000 cannot be printed.
    st.builds(lambda digits, sign: sign * 10 ** digits, st.sampled_from([19, 400, 5000]), st.sampled_from([1, -1])),
    st.sampled_from([2 ** 63, 0, -1, 1, True, False, None,
                     float("nan"), float("inf"), float("-inf"), 1e-300, -0.0]),
    st.text(max_size=30),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "1" * 5000, "\u0661\u0666",
                     "\uff11\uff16", "16\n", "1_000", "0x10", " 5 ", "5s", "", "-0", "2.5", "16.0"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def base_params(**changes):
    params = {"url": "http://127.0.0.1:9", "model": "quasar", "api_key": "", "health_timeout": 0, "interval": 5,
              "progress_interval": 30, "request_timeout": 120, "prompt": "hi", "max_tokens": 16,
              "temperature": 0.7, "stream": True, "check_metrics": False, "container": None, "unit": None,
              "docker_bin": "docker"}
    params.update(changes)
    return params


@pytest.mark.parametrize("name", sorted(RANGES))
@PROPS
@given(value=ANYTHING)
def test_check_params_accepts_only_finite_numbers_in_range(name, value):
    low, high, integer = RANGES[name]
    params = base_params(**{name: value})
    problem = openai_smoke.check_params(params)
    if problem is None:
        converted = params[name]
        assert isinstance(converted, int if integer else float) and not isinstance(converted, bool)
        assert math.isfinite(converted) and low <= converted <= high
    else:
        assert problem.startswith("%s must be %s from " % (name, "an integer" if integer else "a number"))
        assert len(problem) < 300


@PROPS
@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-10 ** 400, max_value=10 ** 400))
def test_check_number_never_raises_and_agrees_with_the_range(value):
    number, error = O.check_number("interval", value, 0.1, 3600)
    finite = not (isinstance(value, float) and not math.isfinite(value))
    inside = finite and 0.1 <= value <= 3600
    assert (error is None) == inside
    if inside:
        assert number == float(value)


@pytest.mark.parametrize("value, expected", [
    ("30", 30.0), (" 2.5 ", 2.5), ("1e3", 1000.0), (7, 7.0), (7.0, 7.0)])
def test_check_number_reads_plain_ascii_numbers(value, expected):
    assert O.check_number("request_timeout", value, 1, 86400) == (expected, None)


@pytest.mark.parametrize("value", ["\u0661\u0666", "\uff11\uff16", "16\n1", "1_000", "0x10", "nan", "inf", True])
def test_check_number_refuses_non_ascii_digits_and_specials(value):
    number, error = O.check_number("max_tokens", value, 1, 1000000, integer=True)
    assert number is None and error.startswith("max_tokens must be an integer from 1 to 1000000, got ")


def test_check_number_shows_a_huge_integer_without_printing_it():
    _number, error = O.check_number("health_timeout", 10 ** 5000, 0, 86400)
    assert error == "health_timeout must be a number from 0 to 86400, got an integer of about 5001 digits"


@PROPS
@given(url=st.text(max_size=40) | st.sampled_from([
    "http://", "http://:80", "http://h:99999", "http://h:0", "http://h:-1", "http://[::1", "https://h/x?y=1",
    "http://h\n:1", "ftp://h", "http://h:8000/"]))
def test_check_url_never_raises(url):
    error = O.check_url(url)
    assert error is None or error.startswith("url ")
    if error is None:
        assert url.startswith(("http://", "https://"))


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            openai_smoke.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(RANGES)), value=ANYTHING.filter(lambda v: not isinstance(v, int) or abs(v) < 10 ** 1000))
def test_module_never_tracebacks_on_any_number_option(capsys, name, value):
    """The whole module (Ansible's argument parsing included), against a closed port: it ends at once."""
    if name == "health_timeout":  # a valid one would wait that long for port 9: keep only the bad ones
        assume(O.check_number(name, value, 0, 86400)[1] is not None)
    args = {"url": "http://127.0.0.1:9", "model": "quasar", "health_timeout": 0}
    args[name] = value
    rc, result = run_module(capsys, args)
    assert rc == 1  # refused, or nothing listening on port 9
    assert name in result["msg"] or "No healthy answer" in result["msg"]


@pytest.mark.parametrize("args, text", [
    ({"interval": "nan"}, "interval must be a number from 0.1 to 3600, got 'nan'"),
    ({"interval": float("nan")}, "interval must be a number from 0.1 to 3600, got nan"),
    ({"health_timeout": float("inf")}, "health_timeout must be a number from 0 to 86400, got inf"),
    ({"request_timeout": 0}, "request_timeout must be a number from 1 to 86400, got 0"),
    ({"request_timeout": -5}, "request_timeout must be a number from 1 to 86400, got -5"),
    ({"max_tokens": 0}, "max_tokens must be an integer from 1 to 1000000, got 0"),
    ({"max_tokens": 2.5}, "max_tokens must be an integer from 1 to 1000000 (a whole number), got 2.5"),
    ({"temperature": -1}, "temperature must be a number from 0 to 2, got -1"),
    ({"progress_interval": 0}, "progress_interval must be a number from 1 to 86400, got 0"),
    ({"url": "http://127.0.0.1:99999"}, "url has a bad host or port"),
    ({"url": "http://127.0.0.1:8000/?x=1"}, "url must be a base URL without ?query"),
    ({"model": ""}, "model must be the served model name"),
    ({"container": "--help"}, "container must be a Docker container name or ID"),
    ({"unit": "-H host"}, "unit must be a systemd unit name"),
])
def test_module_names_the_option_and_the_range(capsys, args, text):
    full = {"url": "http://127.0.0.1:9", "model": "quasar", "health_timeout": 0}
    full.update(args)
    rc, result = run_module(capsys, full)
    assert rc == 1 and result["msg"].startswith(text)


def test_api_key_with_a_newline_is_refused_without_echoing_it(capsys):
    rc, result = run_module(capsys, {"url": "http://127.0.0.1:9", "model": "quasar", "api_key": "sk-abc\r\nX: y"})
    assert rc == 1 and "api_key contains a control character" in result["msg"]
    assert "sk-abc" not in json.dumps(result)


def test_string_numbers_from_templates_still_work(capsys):
    rc, result = run_module(capsys, {"url": "http://127.0.0.1:9", "model": "quasar", "health_timeout": "0",
                                     "interval": "0.5", "max_tokens": "16", "request_timeout": "2"})
    assert rc == 1 and result["msg"].startswith("No healthy answer from http://127.0.0.1:9/health within 0 s")
